/**
 * All-to-all of equal blocks on the CPU backend at 2, 3 and 4 ranks: every dtype,
 * into another array, in place and into memory overlapping the input, against the
 * reference blocks (test/fixtures/alltoall.ts). Over TCP (NCCL_NODE_SHM=0) blocks of up
 * to 256 KiB ride in the agreement round and larger ones go over the backend's own
 * connections; on one host with shared memory every block goes over the own
 * connections (the segment's round carries the agreement). The native counters show
 * which path each call took.
 */
import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

type Row = { case?: string; blockBytes?: number; wrong?: number; first?: string[]; done?: boolean; calls?: number; mesh?: number; tcp?: number };
const MESH_BLOCK = 256 * 1024; // native/gloo/gloo_agreement.cpp, kMeshAllToAllBlock
// 70001 elements: 70 KiB blocks of 1-byte dtypes (in the round), 137-547 KiB of the others.
const SIZES = [1, 5, 1031, 70001];

describe.each([['tcp', '0'], ['shared memory', '1']])('allToAll over %s', (_name, shm) => {
  it.each([2, 3, 4])('%i ranks: every dtype and layout matches the reference', async (size) => {
    const results = await runRanks('test/fixtures/alltoall.ts', size, {
      args: [SIZES.join(',')], env: { NCCL_NODE_SHM: shm }, timeoutMs: 90_000,
    });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
    for (const r of results) {
      const rows = r.reports as Row[];
      const cases = rows.filter((x) => x.case);
      for (const c of cases) expect(c.wrong, `rank ${r.rank} ${c.case} ${c.first?.join(', ')}`).toBe(0);
      const done = rows.find((x) => x.done)!;
      expect(done.calls).toBe(cases.length);
      const small = cases.filter((c) => c.blockBytes! <= MESH_BLOCK).length;
      expect(small).toBeGreaterThan(0);
      expect(small).toBeLessThan(cases.length);
      if (shm === '0') {
        expect([done.mesh, done.tcp], `rank ${r.rank}`).toEqual([small, cases.length - small]);
      } else {
        expect([done.mesh, done.tcp], `rank ${r.rank}`).toEqual([0, cases.length]);
      }
    }
  }, 120_000);
});
