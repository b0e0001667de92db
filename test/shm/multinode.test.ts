/**
 * The shared-memory path across hosts: 2 network-namespace nodes (test/helpers/netns.ts)
 * x 2 ranks. Ranks of a node share a segment, the two nodes' leaders all-reduce over
 * the veth link; results are checked against sums computed in the ranks, and the
 * two-level path is shown taken by the ranks' own counters.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCluster, netnsAvailable, type Cluster, type NetNode } from '../helpers/netns.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.join(ROOT, 'bin/nccl-node.js');
const FIXTURE = 'test/fixtures/shm-netns-rank.mts';
const PORT = 29500;

interface Report { rank: number; size: number; host: string; wrong: number; digests: string[]; stats: Record<string, number | string> }

let cluster: Cluster;

describe.skipIf(!netnsAvailable())('shared memory within each of 2 nodes', { timeout: 60_000 }, () => {
  beforeAll(() => {
    cluster = createCluster(2, 'shm');
  });
  afterAll(() => cluster?.destroy());

  it('2 nodes x 2 ranks: two-level all-reduce (shared memory, then the leaders over TCP) is exact and the same on every rank', async () => {
    const [a, b] = cluster.nodes as [NetNode, NetNode];
    const reports = mkdtempSync(path.join(os.tmpdir(), 'nccl-node-shm-netns-'));
    try {
      const env = { ...process.env, NCCL_NODE_TOKEN: 'shm-netns-token', SHM_REPORTS: reports, SHM_SIZES: '1031,70001,300007', NCCL_NODE_SHM: '1', NCCL_NODE_SHM_CHUNK: '65536' };
      const flags = (node: number): string[] => ['run', '--nnodes', '2', '--node-rank', String(node), '--nproc-per-node', '2',
        '--master-addr', a.addr, '--master-port', String(PORT), FIXTURE];
      const nodes = [a, b].map((n, i) => cluster.spawnOn(n, process.execPath, [BIN, ...flags(i)], { cwd: ROOT, env, timeoutMs: 50_000 }));
      const ends = await Promise.all(nodes.map((x) => x.done));
      expect(ends.map((e) => e.code), nodes.map((x) => x.stderr()).join('\n')).toEqual([0, 0]);
      const got = readdirSync(reports).flatMap((f) => readFileSync(path.join(reports, f), 'utf8').split('\n').filter(Boolean))
        .map((l) => JSON.parse(l) as Report).sort((x, y) => x.rank - y.rank);
      expect(got.map((r) => [r.rank, r.size, r.host, r.wrong])).toEqual([
        [0, 4, a.hostname, 0], [1, 4, a.hostname, 0], [2, 4, b.hostname, 0], [3, 4, b.hostname, 0],
      ]);
      for (const r of got) {
        expect(r.digests).toEqual(got[0]!.digests);
        // Four all-reduces per size above the one-round mesh size (2 sizes), all two-level.
        expect(r.stats).toMatchObject({ segments: 1, allReduces: 8, twoLevel: 8, fallbacks: 0 });
      }
    } finally {
      rmSync(reports, { recursive: true, force: true });
    }
  });
});
