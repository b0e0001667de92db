/**
 * Collectives across hosts: network-namespace nodes (test/helpers/netns.ts), each its own
 * host with its own address, joined by a bridge. With shared memory (2 and 3 nodes x 2
 * ranks) the ranks of a node share a segment and the nodes' leaders all-reduce over the
 * veth links; over TCP alone (2 and 3 nodes x 1 rank) every rank exchanges with the other
 * hosts. The results are checked against sums and blocks computed in the ranks, and the
 * path each call took is shown by the ranks' own counters.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GlooAlgoStats, GlooShmStats } from '../../src/native/contract.js';
import { createCluster, netnsAvailable, type Cluster } from '../helpers/netns.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.join(ROOT, 'bin/nccl-node.js');
const FIXTURE = 'test/fixtures/shm-netns-rank.mts';
const PORT = 29500;

interface Report { rank: number; size: number; host: string; wrong: number; digests: string[]; stats: GlooShmStats; algos: GlooAlgoStats }

let cluster: Cluster;

/** Runs the fixture on the first `nnodes` nodes, `perNode` ranks each; the ranks' reports in rank order. */
async function runJob(nnodes: number, perNode: number, env: Record<string, string>): Promise<Report[]> {
  const nodes = cluster.nodes.slice(0, nnodes);
  const reports = mkdtempSync(path.join(os.tmpdir(), 'nccl-node-shm-netns-'));
  try {
    const jobEnv = { ...process.env, NCCL_NODE_TOKEN: 'shm-netns-token', SHM_REPORTS: reports, ...env };
    const flags = (node: number): string[] => ['run', '--nnodes', String(nnodes), '--node-rank', String(node),
      '--nproc-per-node', String(perNode), '--master-addr', nodes[0]!.addr, '--master-port', String(PORT), FIXTURE];
    const running = nodes.map((n, i) => cluster.spawnOn(n, process.execPath, [BIN, ...flags(i)], { cwd: ROOT, env: jobEnv, timeoutMs: 80_000 }));
    const ends = await Promise.all(running.map((x) => x.done));
    expect(ends.map((e) => e.code), running.map((x) => x.stderr()).join('\n')).toEqual(nodes.map(() => 0));
    const got = readdirSync(reports).flatMap((f) => readFileSync(path.join(reports, f), 'utf8').split('\n').filter(Boolean))
      .map((l) => JSON.parse(l) as Report).sort((x, y) => x.rank - y.rank);
    // Every rank reported once, on the node its rank places it, with every sum exact and
    // the same bits as rank 0 for the fractional data.
    const size = nnodes * perNode;
    expect(got.map((r) => [r.rank, r.size, r.host, r.wrong])).toEqual(
      Array.from({ length: size }, (_, r) => [r, size, nodes[Math.floor(r / perNode)]!.hostname, 0]));
    for (const r of got) expect(r.digests).toEqual(got[0]!.digests);
    return got;
  } finally {
    rmSync(reports, { recursive: true, force: true });
  }
}

describe.skipIf(!netnsAvailable())('collectives across network-namespace hosts', { timeout: 100_000 }, () => {
  beforeAll(() => {
    cluster = createCluster(3, 'shm');
  });
  afterAll(() => cluster?.destroy());

  const shmEnv = { SHM_SIZES: '1031,70001,300007', NCCL_NODE_SHM: '1', NCCL_NODE_SHM_CHUNK: '65536' };

  it('2 nodes x 2 ranks: two-level all-reduce (shared memory, then the leaders over TCP) is exact and the same on every rank', async () => {
    for (const r of await runJob(2, 2, shmEnv)) {
      // Four all-reduces per size above the one-round mesh size (2 sizes), all two-level.
      expect(r.stats).toMatchObject({ segments: 1, allReduces: 8, twoLevel: 8, fallbacks: 0 });
      // Of its TCP connections only those to the rank on its own host get a fixed receive
      // buffer: two where that pair has one each way (both ranks fit the host's cores).
      expect(r.algos.tcpSizedReceiveBuffers).toBe(2 <= os.availableParallelism() ? 2 : 1);
    }
  });

  it('3 nodes x 2 ranks: the two-level all-reduce with three leaders on a TCP ring is exact and the same on every rank', async () => {
    for (const r of await runJob(3, 2, shmEnv)) {
      expect(r.stats).toMatchObject({ segments: 1, allReduces: 8, twoLevel: 8, fallbacks: 0 });
    }
  });

  it('3 nodes x 1 rank over TCP: one round, two rounds and the ring are exact and the same on every rank', async () => {
    // 1031 elements ride the agreement round; 70001 and 300007 (blocks of 93 and 400 KB)
    // take two rounds; 4400001 (blocks of 5.87 MB, beyond the round's 4 MiB) the ring.
    // Between hosts a broadcast rides the round while its root sends at most 1 MiB there
    // (131072 float32 to each of two peers), one element more goes along the chain; on one
    // host the limit is the buffer's 1 MiB alone (test/comm/rooted.test.ts).
    const env = { SHM_SIZES: '1031,70001,300007,4400001', SHM_BROADCASTS: '131072,131073', NCCL_NODE_SHM: '0' };
    for (const r of await runJob(3, 1, env)) {
      expect(r.stats).toMatchObject({ segments: 0, twoLevel: 0 });
      // Every connection is between hosts: none given a fixed receive buffer (the kernel's
      // autotuning sizes a link's window; test/comm/tcp-receive-buffer.test.ts).
      // Nor does any receive go through the bounce buffer, which is for peers on this host
      // (test/comm/tcp-bounce.test.ts).
      expect(r.algos).toMatchObject({ meshAllReduces: 4, meshTwoRoundAllReduces: 8, tcpRingCalls: 4, meshRooted: 1, tcpRooted: 1,
        tcpSizedReceiveBuffers: 0, tcpBouncedBytes: 0 });
    }
  });

  it('2 nodes x 1 rank over TCP: the round at its largest (4 MB blocks to the peer) completes; larger all-reduces take the ring', async () => {
    // At 2 ranks the agreement round carries an all-gather's or reduce-scatter's block of
    // up to 4 MiB whole: both ranks write a 4 MB message at once. Between hosts (veth, the
    // kernel's TCP with its windows as on a real link) the sockets do not hold it, so the
    // round completes only where each rank reads its peer's message while still writing
    // its own (mesh_exchange.cpp, progressTcp); reading it only after its own write was
    // done timed out on both ranks. All-reduces ride the round up to 1 MiB at 2 ranks
    // (gloo_tuning.h): 1031 elements there, 1000003 (4 and 8 MB) on the ring.
    for (const r of await runJob(2, 1, { SHM_SIZES: '1031,1000003', SHM_BLOCKS: '1000003', NCCL_NODE_SHM: '0' })) {
      expect(r.stats).toMatchObject({ segments: 0, twoLevel: 0 });
      // The 4 MB all-gather's block from the peer read straight into the output (landBody).
      expect(r.algos).toMatchObject({ meshAllReduces: 4, tcpRingCalls: 4, meshAllGathers: 1, meshReduceScatters: 1, meshLandedBodies: 1,
        tcpSizedReceiveBuffers: 0, tcpBouncedBytes: 0 });
    }
  });

  it('3 nodes x 1 rank over TCP: all-gathers and reduce-scatters with 4 MB blocks in the round complete', async () => {
    // At 3 ranks the round carries an all-gather's or reduce-scatter's block to each peer:
    // with 1000003 float32 elements every rank writes 4 MB to each of two hosts while both
    // write 4 MB to it, the same reading-while-writing as above with two peers at once.
    for (const r of await runJob(3, 1, { SHM_SIZES: '1031', SHM_BLOCKS: '1031,1000003', NCCL_NODE_SHM: '0' })) {
      expect(r.stats).toMatchObject({ segments: 0, twoLevel: 0 });
      // The 4 MB all-gather's blocks from both peers read straight into the output (landBody).
      expect(r.algos).toMatchObject({ meshAllReduces: 4, meshAllGathers: 2, meshReduceScatters: 2, tcpRingCalls: 0, meshLandedBodies: 2 });
    }
  });
});
