/**
 * Large TCP messages over a slow link between network-namespace hosts (test/helpers/netns.ts):
 * a receive expecting 64 KiB or more sleeps until 256 KiB of it, or all of it, is in
 * (SO_RCVLOWAT, native/net/tcp_mesh.cpp). A message that arrives a segment at a time must
 * still complete exact, and a peer that dies with its message half sent must fail the
 * receiver at once (the kernel wakes a reader at end of stream whatever its mark), not
 * at the call's timeout. NCCL_NODE_TCP_RCVLOWAT sets the mark's size, 0 none.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCluster, netnsAvailable, type Cluster, type Spawned } from '../helpers/netns.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const FIXTURE = 'test/fixtures/tcp-slow-link.ts';
const PORT = 29511;

interface Report { rank: number; wrong?: number; ms?: number; marked?: number; code?: string | null; t0?: number; at?: number }

let cluster: Cluster;

function start(phase: string, env: Record<string, string> = {}): Spawned[] {
  const [n0, n1] = cluster.nodes;
  return [n0!, n1!].map((node, rank) => cluster.spawnOn(node, process.execPath, ['--import', 'tsx', FIXTURE, phase], {
    cwd: ROOT,
    timeoutMs: 90_000,
    env: {
      ...process.env, NCCL_NODE_SHM: '0', NCCL_NODE_TOKEN: 'slow-link-token', RANK: String(rank), LOCAL_RANK: '0',
      WORLD_SIZE: '2', LOCAL_WORLD_SIZE: '1', MASTER_ADDR: n0!.addr, MASTER_PORT: String(PORT), ...env,
    },
  }));
}

const reportOf = (s: Spawned): Report => {
  const line = s.stdout().split('\n').find((l) => l.startsWith('@@'));
  expect(line, s.stderr()).toBeDefined();
  return JSON.parse(line!.slice(2)) as Report;
};

describe.skipIf(!netnsAvailable())('TCP messages over a slow link', { timeout: 100_000 }, () => {
  beforeAll(() => {
    cluster = createCluster(2, 'slow');
  });
  afterAll(() => cluster?.destroy());

  // Unset: the default 256 KiB; 65536: the smallest receive marked waits for all of itself
  // at once; 0: no mark, every segment wakes the reader.
  it.each([
    ['unset', undefined],
    ['65536', '65536'],
    ['0', '0'],
  ])('messages of 1-8 MiB arriving a segment at a time complete exact (NCCL_NODE_TCP_RCVLOWAT %s)', async (_, mark) => {
    cluster.slow(cluster.nodes[1]!, '80mbit');
    try {
      const ranks = start('exact', mark === undefined ? {} : { NCCL_NODE_TCP_RCVLOWAT: mark });
      const ends = await Promise.all(ranks.map((r) => r.done));
      expect(ends.map((e) => e.code), ranks.map((r) => r.stderr()).join('\n')).toEqual([0, 0]);
      const reports = ranks.map(reportOf);
      expect(reports.map((r) => r.wrong)).toEqual([0, 0]);
      // About 10 MiB from rank 1 at 10 MB/s; a receive left asleep would wait out its 60 s
      // timeout's poll (the call then completes, late).
      for (const r of reports) expect(r.ms!).toBeLessThan(20_000);
      // Rank 0 receives the slow side's 1-8 MiB: with a mark it sleeps under it, without none.
      if (mark === '0') expect(reports.map((r) => r.marked)).toEqual([0, 0]);
      else expect(reports[0]!.marked!).toBeGreaterThan(0);
    } finally {
      cluster.unslow();
    }
  });

  it('a peer killed with its 8 MiB message half sent fails the receiver at once', async () => {
    const [n0, n1] = cluster.nodes;
    cluster.slow(n1!, '16mbit'); // 2 MB/s: the 8 MiB take about 4 s
    try {
      const ranks = start('killed');
      while (!ranks[1]!.stdout().includes('sending')) {
        const exited = await Promise.race([ranks[1]!.done.then(() => true), new Promise((r) => setTimeout(() => r(false), 20))]);
        expect(exited, ranks[1]!.stderr()).toBe(false);
      }
      const before = cluster.linkBytes(n0!).rx;
      await new Promise((r) => setTimeout(r, 1000));
      const under = cluster.linkBytes(n0!).rx - before;
      cluster.killNode(n1!);
      const killedAt = Date.now();
      // The kill came while the message was on its way: part of it in, not all.
      expect(under).toBeGreaterThan(512 * 1024);
      expect(under).toBeLessThan(8 * 1024 * 1024);
      const end = await ranks[0]!.done;
      expect(end.code, ranks[0]!.stderr()).toBe(0);
      const r = reportOf(ranks[0]!);
      expect(r.code).toBe('ERR_PEER_LOST');
      // Its timeout is 60 s; the end of the stream wakes it within the link's queue (400 ms).
      expect(r.at! - killedAt).toBeLessThan(5000);
    } finally {
      cluster.unslow();
    }
  });
});
