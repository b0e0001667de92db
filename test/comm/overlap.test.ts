/**
 * Outputs that overlap their inputs without being in place (test/fixtures/overlap.ts):
 * all-reduce, reduce, reduce-scatter and all-gather over TCP and through shared memory,
 * at counts that ride in the agreement round and counts that take the ring or the
 * segment's chunks. Every result must match the reference: the communicator reads such
 * an input from a copy taken at the call.
 */
import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

const COUNTS = [5, 1031, 70001, 1_300_007];

describe.each([['tcp', '0'], ['shared memory', '1']])('overlapping input and output over %s', (_name, shm) => {
  it.each([2, 3])('%i ranks: every result matches the reference', async (size) => {
    const results = await runRanks('test/fixtures/overlap.ts', size, {
      args: [COUNTS.join(',')], env: { NCCL_NODE_SHM: shm }, timeoutMs: 120_000,
    });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
    for (const r of results) {
      const rows = r.reports as { case?: string; wrong?: number; first?: string[]; done?: boolean }[];
      expect(rows.some((x) => x.done), `rank ${r.rank} finished`).toBe(true);
      const cases = rows.filter((x) => x.case);
      expect(cases.length).toBeGreaterThanOrEqual(COUNTS.length * 2 * 2 * 3);
      const wrong = cases.filter((c) => c.wrong !== 0).map((c) => `${c.case}: ${c.wrong} wrong, ${c.first?.join(', ')}`);
      expect(wrong, `rank ${r.rank}`).toEqual([]);
    }
  }, 150_000);
});
