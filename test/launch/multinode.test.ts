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

async function waitFor(what: string, ok: () => boolean, timeoutMs = 30_000): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
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
});
