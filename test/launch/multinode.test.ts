/**
 * Multi-node jobs over real links: each node is a network namespace (test/helpers/netns.ts)
 * with its own address and host name, and runs its own `nccl-node run`; the store and
 * Gloo talk over the veth pairs. Faults are injected the way machines fail: a whole
 * node SIGKILLed, a node's link cut (packets vanish, no resets), a link slowed with tc
 * tbf, the store's node killed. Expectations are computed: exact all-reduce sums, the
 * bytes the kernel counted on the links against the bytes an all-reduce must move, the
 * slowed loop against the tbf rate, and the launcher's documented outcome for each
 * fault (docs/launcher.md), each within a bound.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import { createCluster, netnsAvailable, type Cluster, type NetNode, type Spawned } from '../helpers/netns.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.join(ROOT, 'bin/nccl-node.js');
const FIXTURE = 'test/launch/fixtures/netns-rank.mts';
const PORT = 29500; // every run has namespaces of its own: the port never clashes

interface Report {
  pid: number;
  attempt: number;
  host: string;
  phase: 'ready' | 'done';
  rank: number;
  size: number;
  wrong?: number;
  loopMs?: number;
  addrs?: string[];
  masterAddr?: string;
  groupRank?: number;
}

let cluster: Cluster;
let reports: string;

function readReports(): Report[] {
  return readdirSync(reports).flatMap((f) => readFileSync(path.join(reports, f), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Report));
}

function launch(node: NetNode, flags: string[], env: Record<string, string> = {}): Spawned {
  return cluster.spawnOn(node, process.execPath, [BIN, 'run', ...flags, FIXTURE], {
    cwd: ROOT,
    env: { ...process.env, NCCL_NODE_TOKEN: 'netns-test-token', NETNS_REPORTS: reports, ...env },
    timeoutMs: 60_000,
  });
}

async function waitFor(what: string, ok: () => boolean, timeoutMs = 30_000, log: () => string = () => ''): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}\n${log()}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  return Date.now();
}

const ready = (attempt: number): Report[] => readReports().filter((r) => r.phase === 'ready' && r.attempt === attempt).sort((a, b) => a.rank - b.rank);

/** What a test measured, printed once at the end. */
const measured: Record<string, unknown> = {};

describe.skipIf(!netnsAvailable())('multi-node jobs in network namespaces', { timeout: 60_000 }, () => {
  beforeAll(() => {
    cluster = createCluster(2);
  });
  afterAll(() => {
    cluster?.destroy();
    console.log(`multinode measurements: ${JSON.stringify(measured)}`);
  });
  beforeEach(() => {
    reports = mkdtempSync(path.join(os.tmpdir(), 'nccl-node-netns-'));
  });
  afterEach(() => {
    cluster.killAll();
    cluster.heal();
    for (const n of cluster.nodes) {
      try {
        cluster.unslow(n);
      } catch {
        // Not slowed.
      }
    }
    rmSync(reports, { recursive: true, force: true });
  });

  it('a 2-node x 2-rank Gloo job completes over the veth links with exact sums, and a tbf-slowed link makes it slower', async () => {
    const [a, b] = cluster.nodes as [NetNode, NetNode];
    const n = 65536;
    const iters = 4;
    const run = async (): Promise<{ loopMs: number; tx: number; rx: number }> => {
      const before = cluster.linkBytes(b);
      const flags = (rank: number): string[] => ['--nnodes', '2', '--node-rank', String(rank), '--nproc-per-node', '2', '--master-addr', a.addr, '--master-port', String(PORT)];
      const env = { NETNS_ITERS: String(iters), NETNS_N: String(n) };
      const nodes = [launch(a, flags(0), env), launch(b, flags(1), env)];
      const ends = await Promise.all(nodes.map((x) => x.done));
      expect(ends.map((e) => e.code), nodes.map((x) => x.stderr()).join('\n')).toEqual([0, 0]);
      const after = cluster.linkBytes(b);
      const got = ready(0);
      expect(got.map((r) => [r.rank, r.size, r.host, r.wrong, r.masterAddr, r.addrs])).toEqual([
        [0, 4, a.hostname, 0, a.addr, [a.addr]], [1, 4, a.hostname, 0, a.addr, [a.addr]],
        [2, 4, b.hostname, 0, a.addr, [b.addr]], [3, 4, b.hostname, 0, a.addr, [b.addr]],
      ]);
      rmSync(reports, { recursive: true, force: true });
      reports = mkdtempSync(path.join(os.tmpdir(), 'nccl-node-netns-'));
      return { loopMs: Math.max(...got.map((r) => r.loopMs!)), tx: after.tx - before.tx, rx: after.rx - before.rx };
    };
    const plain = await run();
    // Node b's ranks end with sums of node a's inputs and the other way round: every
    // all-reduce moves at least one n-float vector each way across b's link.
    const least = iters * n * 4;
    expect(plain.tx).toBeGreaterThanOrEqual(least);
    expect(plain.rx).toBeGreaterThanOrEqual(least);

    const rateBitsPerS = 8_000_000;
    cluster.slow(b, '8mbit');
    const slowed = await run();
    // What crossed the link could not have crossed faster than the rate allows.
    const floorMs = (Math.max(slowed.tx, slowed.rx) * 8 / rateBitsPerS) * 1000;
    measured['allreduce'] = { plainLoopMs: Math.round(plain.loopMs), slowedLoopMs: Math.round(slowed.loopMs), linkFloorMs: Math.round(floorMs), txBytes: slowed.tx, rxBytes: slowed.rx };
    expect(slowed.loopMs).toBeGreaterThanOrEqual(0.8 * floorMs);
    expect(slowed.loopMs).toBeGreaterThan(3 * plain.loopMs);
  });

  const elastic = (a: NetNode): string[] => ['--nnodes', '1:2', '--nproc-per-node', '2', '--rdzv-endpoint', `${a.addr}:${PORT}`,
    '--rdzv-last-call', '3', '--join-timeout', '8', '--max-restarts', '1', '--grace-period', '1'];
  const faultEnv = { NETNS_HOLD_MS: '30000', NETNS_TIMEOUT_MS: '4000', NETNS_ITERS: '1', NETNS_N: '1024' };

  it('a whole node killed mid-run (--nnodes 1:2, --max-restarts 1): the store host names it at once and re-forms without it', async () => {
    const [a, b] = cluster.nodes as [NetNode, NetNode];
    // Collectives back to back: the survivor's ranks die of the lost peers within milliseconds of the node.
    const env = { ...faultEnv, NETNS_PAUSE_MS: '0' };
    const la = launch(a, elastic(a), env);
    const lb = launch(b, elastic(a), env);
    await waitFor('attempt 0 on both nodes', () => ready(0).length === 4, 30_000, () => la.stderr() + lb.stderr());
    const t = Date.now();
    cluster.killNode(b);
    const detected = await waitFor('the failure on node a', () => /attempt 0 failed/.test(la.stderr()), 20_000, () => la.stderr());
    const end = await la.done;
    measured['killNode'] = { detectMs: detected - t, exitMs: end.at - t };
    const failed = la.stderr().split('\n').find((l) => l.includes('attempt 0 failed'));
    expect(failed).toContain(`attempt 0 failed: the launcher of node 1 is gone (its store connection closed) on node 1 (${b.hostname})`);
    expect(la.stderr()).toContain(`rendezvous: attempt 1 formed with 1 node(s) (${a.hostname}), world size 2`);
    expect({ code: end.code, killed: (await lb.done).signal }).toEqual({ code: 0, killed: 'SIGKILL' });
    expect(ready(1).map((r) => [r.rank, r.size, r.host, r.wrong])).toEqual([[0, 2, a.hostname, 0], [1, 2, a.hostname, 0]]);
    // The host sees the node's connections close (one store poll, 100 ms); the re-form waits the last call (3 s).
    expect(detected - t).toBeLessThan(2_000);
    expect(end.at - t).toBeLessThan(3_000 + 8_000);
  });

  it('a node cut off mid-run (link down, no resets): the survivor re-forms within the Gloo and join timeouts, the cut node ends with ERR_STORE', async () => {
    const [a, b] = cluster.nodes as [NetNode, NetNode];
    const la = launch(a, elastic(a), faultEnv);
    const lb = launch(b, elastic(a), faultEnv);
    await waitFor('attempt 0 on both nodes', () => ready(0).length === 4, 30_000, () => la.stderr() + lb.stderr());
    const t = Date.now();
    cluster.partition(b);
    const detected = await waitFor('the failure on node a', () => /attempt 0 failed/.test(la.stderr()), 20_000, () => la.stderr());
    const endA = await la.done;
    const endB = await lb.done;
    measured['partition'] = { detectA: detected - t, exitA: endA.at - t, exitB: endB.at - t };
    // Nothing tells node a that b is gone: its ranks' collectives time out (Gloo's timeout, 4 s).
    expect(la.stderr()).toMatch(/\[ERR_TIMEOUT\]|code: 'ERR_TIMEOUT'/);
    expect(la.stderr()).toMatch(/attempt 0 failed: rank [01] \(pid \d+\) exited with code 1/);
    expect(detected - t).toBeGreaterThanOrEqual(3_900);
    expect(detected - t).toBeLessThan(4_000 + 4_000);
    // The round waits for b, still connected as far as a's store can tell, up to --join-timeout (8 s), then goes on alone.
    expect(la.stderr()).toContain(`rendezvous: attempt 1 formed with 1 node(s) (${a.hostname}), world size 2`);
    expect(endA.code).toBe(0);
    expect(ready(1).map((r) => [r.rank, r.size, r.host, r.wrong])).toEqual([[0, 2, a.hostname, 0], [1, 2, a.hostname, 0]]);
    expect(endA.at - t).toBeLessThan(4_000 + 8_000 + 6_000);
    // Node b: its ranks time out too; its launcher's store requests go unanswered until the store client's 30 s request timeout.
    expect(endB.code).toBe(1);
    expect(lb.stderr()).toContain(`error [ERR_STORE]: lost the job's store at ${a.addr}:${PORT}`);
    expect(endB.at - t).toBeLessThan(4_000 + 30_000 + 6_000);
  });

  it('the node hosting the store killed mid-run: the other launcher exits 1 with ERR_STORE naming the store, no restart', async () => {
    const [a, b] = cluster.nodes as [NetNode, NetNode];
    const flags = (rank: number): string[] => ['--nnodes', '2', '--node-rank', String(rank), '--nproc-per-node', '2', '--master-addr', a.addr,
      '--master-port', String(PORT), '--max-restarts', '1', '--grace-period', '1', '--join-timeout', '8'];
    const la = launch(a, flags(0), faultEnv);
    const lb = launch(b, flags(1), faultEnv);
    await waitFor('attempt 0 on both nodes', () => ready(0).length === 4, 30_000, () => la.stderr() + lb.stderr());
    const t = Date.now();
    cluster.killStoreHost();
    const end = await lb.done;
    measured['killStoreHost'] = { exitMs: end.at - t };
    expect({ code: end.code, signal: (await la.done).signal }).toEqual({ code: 1, signal: 'SIGKILL' });
    expect(lb.stderr()).toContain(`nccl-node run: error [ERR_STORE]: lost the job's store at ${a.addr}:${PORT}`);
    expect(readReports().filter((r) => r.attempt > 0)).toEqual([]);
    expect(end.at - t).toBeLessThan(5_000);
  });
});
