/**
 * All-to-all of equal blocks on the CPU backend at 2, 3 and 4 ranks: every dtype,
 * into another array, in place and into memory overlapping the input, against the
 * reference blocks (test/fixtures/alltoall.ts). Over TCP (NCCL_NODE_SHM=0) blocks of up
 * to 256 KiB ride in the agreement round and larger ones go over the backend's own
 * connections; on one host with shared memory whole inputs up to what the segment's
 * round carries ride in that round, larger ones go over the own connections. The
 * native counters show which path each call took.
 */
import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

type Row = { case?: string; n?: number; blockBytes?: number; path?: string; wrong?: number; first?: string[]; done?: boolean };
const MESH_BLOCK = 256 * 1024; // native/gloo/gloo_agreement.cpp, kMeshAllToAllBlock
// The most the segment's round carries at 2 ranks and more (native/gloo/gloo_shm.cpp, shmRoundBytes).
const SHM_ROUND_MAX = 256 * 1024;
// 70001 elements: blocks of 68 KiB (1-byte dtypes) and 137 KiB (2-byte) ride in the TCP round,
// 273 and 547 KiB (4- and 8-byte) go over the connections.
const SIZES = [1, 5, 1031, 70001];

describe.each([['tcp', '0'], ['shared memory', '1']])('allToAll over %s', (_name, shm) => {
  it.each([2, 3, 4])('%i ranks: every dtype and layout matches the reference', async (size) => {
    const results = await runRanks('test/fixtures/alltoall.ts', size, {
      args: [SIZES.join(',')], env: { NCCL_NODE_SHM: shm }, timeoutMs: 90_000,
    });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
    for (const r of results) {
      const rows = r.reports as Row[];
      expect(rows.some((x) => x.done), `rank ${r.rank} finished`).toBe(true);
      const cases = rows.filter((x) => x.case);
      expect(cases).toHaveLength(SIZES.length * 3 * 12);
      for (const c of cases) {
        const where = `rank ${r.rank} ${c.case}`;
        expect(c.wrong, `${where} ${c.first?.join(', ')}`).toBe(0);
        if (shm === '0') {
          expect(c.path, where).toBe(c.blockBytes! <= MESH_BLOCK ? 'mesh' : 'tcp');
        } else if (c.n! <= 5) {
          // A few elements a rank: the segment's round (its capacity is kilobytes).
          expect(c.path, where).toBe('shm');
        } else if (c.blockBytes! * size > SHM_ROUND_MAX) {
          expect(c.path, where).toBe('tcp');
        } else {
          expect(['shm', 'tcp'], where).toContain(c.path);
        }
      }
    }
  }, 120_000);
});
