/**
 * The node self-test a launcher runs before it joins a rendezvous round (`nccl-node run
 * --health-check`): a node that cannot reach the job's store, cannot run a collective
 * among its own ranks' worth of communicators, or has an unhealthy GPU stays out of the
 * gang instead of failing it later.
 *
 * - store: a fresh authenticated connection to the job's store and a PING.
 * - collective: as many Gloo communicators as the node runs ranks, in this process, on
 *   a private store, listening where the ranks will (the interface that reaches the
 *   job's store, or NCCL_NODE_SOCKET_IFNAME); one 1-element all-reduce must give the
 *   expected sum.
 * - gpu: `nccl-node doctor`'s verdict, only where a CUDA driver library is found.
 */
import { randomBytes } from 'node:crypto';

import { doctor } from '../cli/commands/doctor.js';
import { Communicator } from '../comm/communicator.js';
import { createGlooComm } from '../comm/gloo/gloo-init.js';
import { probeLibrary } from '../gpu/detect.js';
import { binding } from '../native.js';
import { StoreClient } from '../rendezvous/client.js';
import { StoreServer } from '../rendezvous/server.js';

export interface HealthCheckOptions {
  storeHost: string;
  storePort: number;
  token: string;
  /** Ranks this node runs: the size of the local collective. */
  localRanks: number;
  timeoutMs: number;
  env?: NodeJS.ProcessEnv;
}

export interface HealthCheck {
  name: 'store' | 'collective' | 'gpu';
  ok: boolean;
  ms: number;
  detail: string;
}

function why(err: unknown): string {
  return err instanceof Error ? `${(err as { code?: string }).code ? `${(err as { code?: string }).code}: ` : ''}${err.message}` : String(err);
}

async function timed(name: HealthCheck['name'], f: () => Promise<string>): Promise<HealthCheck> {
  const t0 = performance.now();
  try {
    const detail = await f();
    return { name, ok: true, ms: performance.now() - t0, detail };
  } catch (err) {
    return { name, ok: false, ms: performance.now() - t0, detail: why(err) };
  }
}

async function storeCheck(o: HealthCheckOptions): Promise<{ detail: string; localAddress: string | undefined }> {
  const client = await StoreClient.connect({
    host: o.storeHost, port: o.storePort, token: o.token, clientName: 'nccl-node run health check',
    connectTimeoutMs: o.timeoutMs, requestTimeoutMs: o.timeoutMs,
  });
  try {
    await client.ping();
    return { detail: `reached the store at ${o.storeHost}:${o.storePort}`, localAddress: client.localAddress };
  } finally {
    await client.close();
  }
}

async function collectiveCheck(o: HealthCheckOptions, localAddress: string | undefined): Promise<string> {
  const n = o.localRanks;
  const token = randomBytes(16).toString('hex');
  const server = await StoreServer.start({ host: '127.0.0.1', port: 0, token });
  const comms: Communicator[] = [];
  try {
    let abandoned = false;
    const natives = await Promise.all([...Array(n).keys()].map(async (rank) => {
      const native = await createGlooComm(binding(), {
        rank, worldSize: n, storeHost: '127.0.0.1', storePort: server.port, token, timeoutMs: o.timeoutMs,
        iface: o.env?.['NCCL_NODE_SOCKET_IFNAME'] ?? o.env?.['GLOO_SOCKET_IFNAME'], localAddress, checkAgreement: false,
      });
      // One that connects after another failed is not used: free it.
      if (abandoned) void native.destroy().catch(() => {});
      return native;
    })).catch((err: unknown) => {
      abandoned = true;
      throw err;
    });
    for (const native of natives) comms.push(new Communicator({ native, timeoutMs: o.timeoutMs }));
    const bufs = comms.map((c) => new Float64Array([c.rank + 1]));
    await Promise.all(comms.map((c, i) => c.allReduce(bufs[i]!)));
    const expected = (n * (n + 1)) / 2;
    const wrong = bufs.findIndex((b) => b[0] !== expected);
    if (wrong >= 0) throw new Error(`the all-reduce of 1..${n} gave ${bufs[wrong]![0]} on rank ${wrong}, expected ${expected}`);
    return `${n}-rank Gloo all-reduce gave ${expected}`;
  } finally {
    await Promise.allSettled(comms.map((c) => c.destroy()));
    await server.close().catch(() => {});
  }
}

async function gpuCheck(o: HealthCheckOptions): Promise<string> {
  const report = await doctor(o.timeoutMs, o.env ?? process.env);
  if (report.verdict !== 'ready') throw new Error(report.problems.join('; '));
  return `doctor: ready${report.warnings.length ? ` (${report.warnings.join('; ')})` : ''}`;
}

/** Runs the checks in order; a failed store check skips the others. */
export async function runHealthCheck(o: HealthCheckOptions): Promise<HealthCheck[]> {
  let localAddress: string | undefined;
  const store = await timed('store', async () => {
    const r = await storeCheck(o);
    localAddress = r.localAddress;
    return r.detail;
  });
  if (!store.ok) return [store];
  const checks = [store, await timed('collective', () => collectiveCheck(o, localAddress))];
  if (probeLibrary('cuda', o.env ?? process.env).path !== undefined) checks.push(await timed('gpu', () => gpuCheck(o)));
  return checks;
}

/** One line for the launcher's output: the failed checks, or undefined when all passed. */
export function healthProblems(checks: readonly HealthCheck[]): string | undefined {
  const failed = checks.filter((c) => !c.ok);
  return failed.length === 0 ? undefined : failed.map((c) => `${c.name}: ${c.detail}`).join('; ');
}

/** How long the whole self-test may take. */
export const HEALTH_CHECK_TIMEOUT_MS = 30_000;

/**
 * The launcher's use: runs the self-test for this node and returns why it is refused (a
 * line naming the host and the failed checks), or undefined when it may join.
 */
export async function refusal(o: { masterAddr: string; nprocPerNode: number; env: NodeJS.ProcessEnv }, port: number, token: string, host: string): Promise<string | undefined> {
  const checks = await runHealthCheck({ storeHost: o.masterAddr, storePort: port, token, localRanks: o.nprocPerNode, timeoutMs: HEALTH_CHECK_TIMEOUT_MS, env: o.env });
  const problems = healthProblems(checks);
  return problems === undefined ? undefined : `node ${host} failed its health check (${problems}); it does not join the rendezvous`;
}
