/**
 * All-to-all of equal blocks on the CPU backend at 2, 3 and 4 ranks: every dtype,
 * into another array, in place and into memory overlapping the input, against the
 * reference blocks (test/fixtures/alltoall.ts). Over TCP (NCCL_NODE_SHM=0) blocks of up
 * to 1 MiB ride in the agreement round and larger ones go over the backend's own
 * connections; on one host with shared memory whole inputs up to what the segment's
 * round carries ride in that round, larger ones go through the segment in rounds of
 * each rank's piece of every block (several rounds at 70001 elements, pieces that end
 * off a 64-byte line). The native counters show which path each call took.
 */
import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

type Row = { case?: string; n?: number; blockBytes?: number; path?: string; wrong?: number; first?: string[]; done?: boolean };
const MESH_BLOCK = 1024 * 1024; // native/gloo/gloo_agreement.cpp, kMeshAllToAllBlock
// 70001 elements: blocks of 68 KiB-547 KiB ride in the TCP round; 270001: blocks of 264 and
// 527 KiB (1- and 2-byte dtypes) too, 1.03 and 2.06 MiB (4- and 8-byte) go over the connections.
const SIZES = { '0': [1, 5, 1031, 70001, 270001], '1': [1, 5, 1031, 70001] } as const;

describe.each([['tcp', '0'], ['shared memory', '1']] as const)('allToAll over %s', (_name, shm) => {
  it.each([2, 3, 4])('%i ranks: every dtype and layout matches the reference', async (size) => {
    const results = await runRanks('test/fixtures/alltoall.ts', size, {
      args: [SIZES[shm].join(',')], env: { NCCL_NODE_SHM: shm }, timeoutMs: 110_000,
    });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
    for (const r of results) {
      const rows = r.reports as Row[];
      expect(rows.some((x) => x.done), `rank ${r.rank} finished`).toBe(true);
      const cases = rows.filter((x) => x.case);
      expect(cases).toHaveLength(SIZES[shm].length * 3 * 12);
      for (const c of cases) {
        const where = `rank ${r.rank} ${c.case}`;
        expect(c.wrong, `${where} ${c.first?.join(', ')}`).toBe(0);
        if (shm === '0') {
          expect(c.path, where).toBe(c.blockBytes! <= MESH_BLOCK ? 'mesh' : 'tcp');
        } else {
          // Within the host every size goes through the segment: its agreement round or its piece rounds.
          expect(c.path, where).toBe('shm');
        }
      }
    }
  }, 120_000);
});
