/**
 * allToAll with per-peer counts on Gloo at 2 to 4 ranks: results against the
 * locally computed reference, mismatched counts failing every rank with
 * ERR_SIZE_MISMATCH (the group stays usable), and bad arguments. Over the own TCP
 * connections (NCCL_NODE_SHM=0, as between hosts) and through one host's shared-memory
 * segment, there also with 256-byte slots: blocks of up to 2.6 KB then cross in dozens
 * of rounds of 64-128-byte pieces, every block length a different number of them.
 */
import { describe, expect, it } from 'vitest';
import { DTYPES } from '../../src/index.js';
import { describeRanks, runRanks, type RankResult } from '../helpers/ranks.js';

type Step = { step: string; rank: number; ok: boolean; code?: string; message?: string };
const steps = (results: RankResult[], name: string) =>
  results.flatMap((r) => r.reports.filter((x) => x.step === name) as Step[]);

const PATHS = {
  tcp: { NCCL_NODE_SHM: '0' },
  shm: { NCCL_NODE_SHM: '1' },
  'shm, 256-byte slots': { NCCL_NODE_SHM: '1', NCCL_NODE_SHM_CHUNK: '256' },
} as const;

describe.each([
  [2, true, 'tcp'], [4, true, 'tcp'], [2, false, 'tcp'], [2, true, 'shm'], [3, true, 'shm, 256-byte slots'],
  [4, false, 'shm, 256-byte slots'],
] as const)('allToAll with sendCounts/recvCounts at %i ranks (checkCollectives %s, %s)', (size, check, path) => {
  it('matches the reference for every dtype, with zero counts and silent ranks', async () => {
    const results = await runRanks('test/fixtures/alltoallv.ts', size, {
      env: { FIXTURE_CHECK: check ? '1' : '0', ...PATHS[path] },
      timeoutMs: 60_000,
    });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
    expect(results.flatMap((r) => r.reports.filter((x) => 'fail' in x))).toEqual([]);
    for (const r of results) {
      const done = r.reports.find((x) => x.done === true);
      expect(Number(done?.cases), `rank ${r.rank}`).toBe(DTYPES.length + 3 + (check ? 2 : 0));
      // Every exchange took the path asked for, none the other.
      const [on, off] = path === 'tcp' ? ['tcp', 'shm'] : ['shm', 'tcp'];
      expect(Number(done?.[on]), `rank ${r.rank} ${on}`).toBeGreaterThanOrEqual(Number(done?.cases));
      expect(Number(done?.[off]), `rank ${r.rank} ${off}`).toBe(0);
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
