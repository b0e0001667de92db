/**
 * allToAll with per-peer counts on Gloo at 2 and 4 ranks: results against the
 * locally computed reference, mismatched counts failing every rank with
 * ERR_SIZE_MISMATCH (the group stays usable), and bad arguments.
 */
import { describe, expect, it } from 'vitest';
import { DTYPES } from '../../src/index.js';
import { describeRanks, runRanks, type RankResult } from '../helpers/ranks.js';

type Step = { step: string; rank: number; ok: boolean; code?: string; message?: string };
const steps = (results: RankResult[], name: string) =>
  results.flatMap((r) => r.reports.filter((x) => x.step === name) as Step[]);

describe.each([
  [2, true], [4, true], [2, false],
])('allToAll with sendCounts/recvCounts at %i ranks (checkCollectives %s)', (size, check) => {
  it('matches the reference for every dtype, with zero counts and silent ranks', async () => {
    const results = await runRanks('test/fixtures/alltoallv.ts', size, {
      env: { FIXTURE_CHECK: check ? '1' : '0' },
      timeoutMs: 60_000,
    });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
    expect(results.flatMap((r) => r.reports.filter((x) => 'fail' in x))).toEqual([]);
    for (const r of results) {
      const done = r.reports.find((x) => x.done === true);
      expect(Number(done?.cases), `rank ${r.rank}`).toBe(DTYPES.length + 3 + (check ? 2 : 0));
    }
    if (!check) return;

    // Rank 0 sends 3 to rank 1, which expects 2: every rank fails, naming both sides.
    const mismatch = steps(results, 'mismatch');
    expect(mismatch).toHaveLength(size);
    for (const s of mismatch) {
      expect(s.code).toBe('ERR_SIZE_MISMATCH');
      expect(s.message).toContain(`allToAll failed on rank ${s.rank} of ${size}`);
      expect(s.message).toContain('rank 0 sends 3 elements to rank 1 (its sendCounts[1]), rank 1 expects 2 from rank 0');
    }
    for (const s of steps(results, 'form')) {
      expect(s.code).toBe('ERR_SIZE_MISMATCH');
      expect(s.message).toMatch(/with per-rank counts of float32|of \d+ x float32/);
    }
    expect(steps(results, 'after').every((s) => s.ok)).toBe(true);

    const codes: Record<string, [string, RegExp]> = {
      countsLength: ['ERR_SIZE_MISMATCH', new RegExp(`sendCounts has ${size + 1} entries, expected one per rank \\(${size}\\)`)],
      negative: ['ERR_INVALID_ARGUMENT', /sendCounts\.0: /],
      fractional: ['ERR_INVALID_ARGUMENT', /recvCounts\.0: /],
      onlySend: ['ERR_INVALID_ARGUMENT', /sendCounts and recvCounts must be given together/],
      inputShort: ['ERR_SIZE_MISMATCH', new RegExp(`sendCounts add up to ${2 * size} elements, the input holds ${2 * size - 1}`)],
      outputShort: ['ERR_SIZE_MISMATCH', /recvCounts add up to \d+ elements, the output holds/],
      selfBlock: ['ERR_SIZE_MISMATCH', /must equal recvCounts\[\d\] \(1\), the block this rank keeps/],
      sameBuffer: ['ERR_INVALID_ARGUMENT', /input and output must be different buffers/],
      outputDtype: ['ERR_INVALID_ARGUMENT', /output: dtype float32/],
    };
    for (const [name, [code, message]] of Object.entries(codes)) {
      const got = steps(results, name);
      expect(got, name).toHaveLength(size);
      for (const s of got) {
        expect(s.code, name).toBe(code);
        expect(s.message, name).toMatch(new RegExp(`^allToAll on rank ${s.rank} of ${size}`));
        expect(s.message, name).toMatch(message);
      }
    }
  }, 90_000);
});
