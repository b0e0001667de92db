import { mkdtempSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DTYPES, REDUCE_OPS } from '../../src/index.js';
import { describeRanks, runRanks } from '../helpers/ranks.js';

// The all-gather and reduce-scatter algorithms the CPU backend can choose (Gloo's legacy
// classes, the mesh round, the backend's own TCP ring, gloo::allgather and the
// all-to-all reduce-scatter), each
// forced at every size through an NCCL_NODE_GLOO_TUNING table, at 2, 3 (not a power
// of two: halving-doubling takes its uneven path) and 4 ranks, on odd counts, against
// test/helpers/reference.ts; the native counters show the forced path ran.
// Mesh sizes stay within what the agreement round carries per peer (4 MiB at 2-4
// ranks); the largest (70001 x 8 bytes at 2 ranks, 20011 x 8 at 3-4) also goes
// beyond what the round copies (64 KiB) and what the calling thread sends (256 KiB in all).
const TABLES = {
  legacy: { allgather: 'legacy-ring', reducescatter: 'halving-doubling', sizes: [1, 5, 1031, 4099] },
  mesh: { allgather: 'mesh', reducescatter: 'mesh', sizes: [1, 5, 1031, 4099], large: [70001, 20011] },
  // The own ring at every size: 1 element leaves ranks with empty blocks.
  'tcp-ring': { allgather: 'tcp-ring', reducescatter: 'tcp-ring', sizes: [1, 5, 1031, 4099] },
  // Gloo's new-style all-gather and the all-to-all reduce-scatter (only where a table names them).
  gloo: { allgather: 'gloo', reducescatter: 'alltoall', sizes: [1, 5, 1031, 4099] },
} as const;

type Row = {
  case?: string; digest?: string; wrong?: number; first?: string[]; maxErr?: number; bound?: number;
  done?: boolean; gathers?: number; scatters?: number; allScatters?: number; stats?: Record<string, number>;
};

describe.each(Object.keys(TABLES) as (keyof typeof TABLES)[])('all-gather and reduce-scatter forced to %s', (name) => {
  it.each([2, 3, 4])('%i ranks: every result matches the reference, all-gathers have the same bits on every rank', async (size) => {
    const t = TABLES[name];
    const sizes: number[] = [...t.sizes, ...('large' in t ? [t.large[size === 2 ? 0 : 1]!] : [])];
    const file = join(mkdtempSync(join(tmpdir(), 'gloo-coll-')), 'tuning.json');
    writeFileSync(file, JSON.stringify({
      allgather: { [size]: [{ maxBytes: null, algorithm: t.allgather }] },
      reducescatter: { [size]: [{ maxBytes: null, algorithm: t.reducescatter }] },
    }));
    const results = await runRanks<Row>('test/fixtures/gloo-coll-algos.ts', size, {
      args: [sizes.join(',')],
      env: { NCCL_NODE_GLOO_TUNING: file, NCCL_NODE_SHM: '0' }, timeoutMs: 60_000,
    });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
    const rows = results.map((r) => r.reports as Row[]);
    for (const rank of rows) {
      const done = rank.find((x) => x.done)!;
      expect(done, 'finished').toBeDefined();
      for (const row of rank.filter((x) => x.case)) {
        if (row.wrong !== undefined) expect(row.wrong, `${row.case} ${row.first?.join(', ')}`).toBe(0);
        else expect(row.maxErr!, row.case).toBeLessThanOrEqual(row.bound!);
      }
      const s = done.stats!;
      if (name === 'tcp-ring') {
        expect(s.tcpRingCalls).toBe(done.gathers! + done.allScatters!);
        expect(s.meshAllGathers! + s.legacyAllGathers! + s.legacyReduceScatters!).toBe(0);
      } else if (name === 'gloo') {
        expect(s.glooAllGathers).toBe(done.gathers);
        expect(s.meshAllGathers! + s.meshReduceScatters! + s.tcpRingCalls! + s.legacyAllGathers! + s.legacyReduceScatters!).toBe(0);
      } else if (name === 'legacy') {
        expect(s.legacyAllGathers).toBe(done.gathers);
        expect(s.legacyReduceScatters).toBe(done.scatters);
        expect(s.meshAllGathers).toBe(0);
      } else {
        expect(s.meshAllGathers).toBe(done.gathers);
        expect(s.meshReduceScatters).toBe(done.allScatters);
        expect(s.legacyAllGathers! + s.legacyReduceScatters!).toBe(0);
      }
    }
    const gathered = rows.map((rank) => rank.filter((x) => x.case?.startsWith('allGather')).map((x) => `${x.case} ${x.digest}`));
    expect(gathered[0]!.length).toBe(sizes.length * 12 * 2);
    for (const d of gathered.slice(1)) expect(d).toEqual(gathered[0]);
  }, 90_000);
});

// A legacy class returns while its last message may still be queued in Gloo's
// transport; a rank that destroys at once must not drop it under a peer still
// waiting for it (native/gloo/gloo_backend.cpp, finish()). Over TCP, 4 ranks, two
// calls (float32, float64) and no barrier before destroy, several runs: before
// finish(), 2 to 4 runs in 10 of the reduce-scatter failed on ranks 1 and 2 with
// ERR_PEER_LOST under their last call.
describe('legacy classes as the last calls, then destroy at once', () => {
  const TRIALS = 8;
  it.each([
    ['reduceScatter', { reducescatter: { 4: [{ maxBytes: null, algorithm: 'halving-doubling' }] } }, 'legacyReduceScatters'],
    ['allReduce', { allreduce: { 4: [{ maxBytes: null, algorithm: 'halving-doubling' }] } }, 'legacyAllReduces'],
    ['allGather', { allgather: { 4: [{ maxBytes: null, algorithm: 'legacy-ring' }] } }, 'legacyAllGathers'],
  ] as const)('%s: every rank gets the right results and destroys cleanly', async (coll, table, counter) => {
    const file = join(mkdtempSync(join(tmpdir(), 'gloo-teardown-')), 'tuning.json');
    writeFileSync(file, JSON.stringify(table));
    const sum = 1 + 2 + 3 + 4; // rank r contributes r + 1 everywhere
    const want = coll === 'allGather' ? [1, 4] : [sum, sum];
    for (let trial = 0; trial < TRIALS; trial++) {
      const results = await runRanks('test/fixtures/gloo-legacy-teardown.ts', 4, {
        args: [coll, '4099'], env: { NCCL_NODE_GLOO_TUNING: file, NCCL_NODE_SHM: '0' }, timeoutMs: 30_000,
      });
      for (const r of results) {
        const rows = r.reports as Record<string, any>[];
        const where = `trial ${trial}, rank ${r.rank}: ${JSON.stringify(rows.find((x) => x.failed))}`;
        expect(rows.filter((x) => x.dtype).map((x) => [x.dtype, x.first, x.last]), where)
          .toEqual([['Float32Array', ...want], ['Float64Array', ...want]]);
        expect(rows.find((x) => x.legacy)?.legacy[counter], where).toBe(2);
        expect(rows.some((x) => x.destroyed), where).toBe(true);
        expect(r.code, where).toBe(0);
      }
    }
  }, 150_000);
});

// The built-in all-gather beyond the round: the own TCP ring at every size, with no
// tuning file (native/gloo/gloo_tuning.cpp, pickAllGather); gloo::allgather only where a
// table names it (above).
describe('built-in all-gather beyond the round', () => {
  const run = async (size: number, count: number) => {
    const results = await runRanks('test/fixtures/gloo-legacy-teardown.ts', size, {
      args: ['allGather', String(count)], env: { NCCL_NODE_SHM: '0' }, timeoutMs: 60_000,
    });
    return results.map((r) => {
      const rows = r.reports as Record<string, any>[];
      const where = `rank ${r.rank}: ${JSON.stringify(rows.find((x) => x.failed))}`;
      // Rank r contributes r + 1: the gathered output starts with 1 and ends with size.
      expect(rows.filter((x) => x.dtype).map((x) => [x.first, x.last]), where).toEqual([[1, size], [1, size]]);
      expect(r.code, where).toBe(0);
      return rows.find((x) => x.legacy)!.legacy as Record<string, number>;
    });
  };
  // float32 and float64: 2097151 elements at 2 ranks gather 16 MiB - 8 B and 32 MiB - 16 B
  // (beyond the round, under 32 MiB); the others gather 32 MiB and more.
  it.each([[2, 2097151], [2, 4194304], [4, 2097152]])('%i ranks, %i elements per rank: both calls on the own ring', async (size, count) => {
    for (const s of await run(size, count)) {
      expect(s.tcpRingCalls).toBe(2);
      expect(s.glooAllGathers! + s.legacyAllGathers! + s.meshAllGathers!).toBe(0);
    }
  }, 90_000);
});

// The built-in all-reduce beyond the mesh round (up to 1 MiB at 2 ranks, 64 KiB at 3-8):
// at 3-4 ranks two rounds while each rank's block fits the round (4 MiB),
// beyond that the backend's own ring over its own TCP connections at every group size
// (native/gloo/gloo_tuning.cpp), with no tuning file; no legacy class runs.
describe('built-in all-reduce beyond the mesh round', () => {
  const run = async (size: number, count: number) => {
    const results = await runRanks('test/fixtures/gloo-legacy-teardown.ts', size, {
      args: ['allReduce', String(count)], env: { NCCL_NODE_SHM: '0' }, timeoutMs: 30_000,
    });
    const sum = (size * (size + 1)) / 2;
    return results.map((r) => {
      const rows = r.reports as Record<string, any>[];
      const where = `rank ${r.rank}: ${JSON.stringify(rows.find((x) => x.failed))}`;
      expect(rows.filter((x) => x.dtype).map((x) => [x.first, x.last]), where).toEqual([[sum, sum], [sum, sum]]);
      expect(r.code, where).toBe(0);
      return rows.find((x) => x.legacy)!.legacy as Record<string, number>;
    });
  };
  // float32 and float64: at 4 ranks 4400001 elements make blocks of 4.2 and 8.4 MiB, one
  // past the round's 4 MiB; at 2 ranks buffers of 16.8 and 33.6 MiB.
  it.each([2, 3, 4])('%i ranks, 4400001 elements: both calls on the own TCP ring, right sums', async (size) => {
    for (const s of await run(size, 4400001)) {
      expect(s.legacyAllReduces).toBe(0);
      expect(s.tcpRingCalls).toBe(2);
    }
  }, 60_000);
  // At 2 ranks the round carries all-reduces up to 1 MiB (kMeshAllReduceBytesTwoRanks):
  // 262144 elements are 1 MiB of float32 (the round) and 2 MiB of float64 (the ring);
  // one more element puts the float32 call past it too.
  it.each([[262144, 1, 1], [262145, 0, 2]])('2 ranks, %i elements: %i of the 2 calls in the round, %i on the own ring, right sums', async (count, round, ring) => {
    for (const s of await run(2, count)) {
      expect(s.meshAllReduces).toBe(round);
      expect(s.tcpRingCalls).toBe(ring);
      expect(s.legacyAllReduces).toBe(0);
    }
  }, 60_000);
  // 70001 elements: buffers of 273-547 KiB, past the one round's 64 KiB (blocks of 68-182
  // KiB); 1100001: blocks of 1.05-2.8 MiB, past the round's former 1 MiB at 3-4 ranks,
  // within its 4 MiB.
  it.each([[3, 70001], [4, 70001], [3, 1100001], [4, 1100001]])('%i ranks, %i elements: both calls in two rounds, right sums', async (size, count) => {
    for (const s of await run(size, count)) {
      expect(s.meshTwoRoundAllReduces).toBe(2);
      expect(s.tcpRingCalls! + s.legacyAllReduces!).toBe(0);
    }
  }, 60_000);
});

// The two-round all-reduce forced at every size through a tuning table, over TCP, on
// every dtype and op, in place and out of place, against test/helpers/reference.ts:
// a count of 1 leaves ranks with empty blocks, 1031 and 20011 do not divide by 3
// or 4 (the last block is short), 20011 x 8 bytes goes beyond what the round copies.
describe('all-reduce forced to two rounds (mesh-rs-ag)', () => {
  it.each([3, 4])('%i ranks: every dtype and op matches the reference', async (size) => {
    const file = join(mkdtempSync(join(tmpdir(), 'gloo-two-round-')), 'tuning.json');
    writeFileSync(file, JSON.stringify({ allreduce: { [size]: [{ maxBytes: null, algorithm: 'mesh-rs-ag' }] } }));
    const results = await runRanks('test/fixtures/collectives.ts', size, {
      args: ['1,1031,20011', '0'],
      env: { NCCL_NODE_GLOO_TUNING: file, NCCL_NODE_SHM: '0', FIXTURE_CHECK: '1' },
      timeoutMs: 240_000,
    });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
    expect(results.flatMap((r) => r.reports.filter((x) => 'fail' in x))).toEqual([]);
    for (const r of results) {
      const done = r.reports.find((x) => x.done === true) as { algos: Record<string, number> } | undefined;
      expect(done, `rank ${r.rank} did not finish`).toBeDefined();
      // Every all-reduce (2 per size, dtype and op) took two rounds, none the one round.
      expect(done!.algos.meshAllReduces).toBe(0);
      expect(done!.algos.meshTwoRoundAllReduces).toBeGreaterThanOrEqual(3 * DTYPES.length * REDUCE_OPS.length * 2);
    }
  }, 300_000);
});

// Over TCP a peer's block that rides in the agreement round is read straight into the
// output when its place there is apart from this rank's input and its message is the
// same call's (native/gloo/mesh_exchange.cpp, landBody); otherwise it goes through the
// round's own buffer and is copied out, as before. Every result is checked either way.
describe('the TCP round reads large blocks straight into the output', () => {
  it('2 ranks: all-gather, all-to-all, gather, broadcast and scatter in every layout right; landed where apart; a mismatched call lands nothing', async () => {
    const results = await runRanks('test/fixtures/mesh-landing.ts', 2, { env: { NCCL_NODE_SHM: '0' }, timeoutMs: 60_000 });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual([0, 0]);
    for (const r of results) {
      const rows = r.reports as Record<string, any>[];
      expect(rows.some((x) => x.done), `rank ${r.rank} finished`).toBe(true);
      const byCase: Record<string, Record<string, any>> = Object.fromEntries(rows.filter((x) => x.case).map((x) => [x.case, x]));
      for (const c of Object.values(byCase)) if ('wrong' in c) expect(c.wrong, `rank ${r.rank} ${c.case}`).toBe(0);
      const landed = Object.fromEntries(Object.entries(byCase).map(([k, v]) => [k, v.landed]));
      expect(landed, `rank ${r.rank}`).toEqual({
        'allGather/apart': 1, 'allGather/inPlace': 1, 'allGather/overlapping': 1,
        'allToAll/apart': 1, 'allToAll/inPlace': 0,
        'scatter/root=0': r.rank === 0 ? 0 : 1, 'scatter/root=1': r.rank === 1 ? 0 : 1,
        // A gather's root receives the peer's block; the other rank receives nothing.
        'gather/root=0': r.rank === 0 ? 1 : 0, 'gather/root=0/inPlace': r.rank === 0 ? 1 : 0,
        'gather/root=1': r.rank === 1 ? 1 : 0, 'gather/root=1/inPlace': r.rank === 1 ? 1 : 0,
        // A broadcast's other rank receives the root's buffer.
        'broadcast/root=0': r.rank === 0 ? 0 : 1, 'broadcast/root=1': r.rank === 1 ? 0 : 1,
        // At 2 ranks an all-reduce's one round lands nothing (every block is reduced).
        allReduce: 0, 'allReduce/uneven': 0, mismatch: 0, 'allGather/after': 1,
      });
      expect(byCase.mismatch?.code, `rank ${r.rank}`).toBe('ERR_SIZE_MISMATCH');
      expect(byCase.mismatch?.untouched, `rank ${r.rank}`).toBe(true);
    }
  }, 90_000);

  // Where a host's ranks outnumber its cores, blocks land from 32 KiB (gloo_agreement.cpp,
  // landBodies); elsewhere from 256 KiB, so 100 KB blocks land here only when this
  // machine has fewer than 4 cores.
  it('4 ranks, 100 KB blocks (an all-reduce\'s second round too): landed where the ranks outnumber the cores, else copied; every result right', async () => {
    const P = 4;
    const lands = cpus().length < P;
    const results = await runRanks('test/fixtures/mesh-landing.ts', P, { args: ['25003'], env: { NCCL_NODE_SHM: '0' }, timeoutMs: 60_000 });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual([0, 0, 0, 0]);
    for (const r of results) {
      const rows = r.reports as Record<string, any>[];
      expect(rows.some((x) => x.done), `rank ${r.rank} finished`).toBe(true);
      const byCase: Record<string, Record<string, any>> = Object.fromEntries(rows.filter((x) => x.case).map((x) => [x.case, x]));
      for (const c of Object.values(byCase)) if ('wrong' in c) expect(c.wrong, `rank ${r.rank} ${c.case}`).toBe(0);
      const n = (k: number): number => (lands ? k : 0);
      const root = (q: number, atRoot: number, elsewhere: number): number => n(r.rank === q ? atRoot : elsewhere);
      const landed = Object.fromEntries(Object.entries(byCase).filter(([k]) => k !== 'mismatch').map(([k, v]) => [k, v.landed]));
      expect(landed, `rank ${r.rank}`).toEqual({
        'allGather/apart': n(P - 1), 'allGather/inPlace': n(P - 1), 'allGather/overlapping': n(P - 1),
        'allToAll/apart': n(P - 1), 'allToAll/inPlace': 0,
        'scatter/root=0': root(0, 0, 1), 'scatter/root=1': root(1, 0, 1),
        'gather/root=0': root(0, P - 1, 0), 'gather/root=0/inPlace': root(0, P - 1, 0),
        'gather/root=1': root(1, P - 1, 0), 'gather/root=1/inPlace': root(1, P - 1, 0),
        'broadcast/root=0': root(0, 0, 1), 'broadcast/root=1': root(1, 0, 1),
        // The second round of the two-round all-reduce: every peer's reduced block, the
        // last rank's shorter one too.
        allReduce: n(P - 1), 'allReduce/uneven': n(P - 1), 'allGather/after': n(P - 1),
      });
      expect(byCase.mismatch?.code, `rank ${r.rank}`).toBe('ERR_SIZE_MISMATCH');
      if (r.rank === 0) expect(byCase.mismatch, 'rank 0, whose peers all differ from it').toMatchObject({ untouched: true, landed: 0 });
    }
  }, 90_000);
});
