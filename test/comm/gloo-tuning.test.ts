import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { tuningFromSweep, type SweepRow } from '../../bench/comm/sweep-tuning.js';
import { canonicalTuning, loadGlooTuning, parseTuning } from '../../src/comm/gloo/tuning.js';
import { isNcclNodeError } from '../../src/errors.js';
import { runRanks } from '../helpers/ranks.js';

type Row = { ok: boolean; code?: string; message?: string; gathered?: number[] };

const dir = mkdtempSync(join(tmpdir(), 'gloo-tuning-'));
const file = (name: string, text: string): string => {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
};

// FNV-1a 64, written here from its definition (offset basis and prime), as the
// reference for the hash the backend names.
function fnv1a(s: string): string {
  let h = 0xcbf29ce484222325n;
  for (const b of Buffer.from(s, 'utf8')) h = BigInt.asUintN(64, (h ^ BigInt(b)) * 0x100000001b3n);
  return h.toString(16).padStart(16, '0');
}

const GOOD = {
  version: 1,
  allreduce: { 2: [{ maxBytes: 4096, algorithm: 'mesh' }, { maxBytes: null, algorithm: 'halving-doubling' }] },
  allgather: { 2: [{ maxBytes: null, algorithm: 'legacy-ring' }] },
};

describe('NCCL_NODE_GLOO_TUNING file', () => {
  it('canonical text: one rule per line, collectives and world sizes in a fixed order', () => {
    const doc = parseTuning({ ...GOOD, reducescatter: { 4: [{ maxBytes: 10, algorithm: 'auto' }], 3: [{ maxBytes: null, algorithm: 'alltoall' }] } }, 'x');
    expect(canonicalTuning(doc)).toBe(
      'allreduce 2 4096 mesh\nallreduce 2 inf halving-doubling\nallgather 2 inf legacy-ring\n' +
      'reducescatter 3 inf alltoall\nreducescatter 4 10 auto\n');
  });

  it.each([
    ['an algorithm of another collective', { allgather: { 2: [{ maxBytes: null, algorithm: 'halving-doubling' }] } }, /allgather\.2\.0\.algorithm/],
    ['sizes that do not grow', { allreduce: { 2: [{ maxBytes: 100, algorithm: 'mesh' }, { maxBytes: 100, algorithm: 'ring' }] } }, /must grow from rule to rule: 100 after 100/],
    ['null before the last rule', { allreduce: { 2: [{ maxBytes: null, algorithm: 'mesh' }, { maxBytes: 100, algorithm: 'ring' }] } }, /only in the last rule/],
    ['a world size that is not a number', { allreduce: { two: [{ maxBytes: null, algorithm: 'ring' }] } }, /world size/],
    ['an unknown collective', { broadcast: {} }, /broadcast/],
    ['an empty rule list', { allreduce: { 2: [] } }, /allreduce\.2/],
  ])('rejects %s with ERR_INVALID_ARGUMENT naming where', (_, doc, why) => {
    let err: unknown;
    try {
      parseTuning(doc, '/t.json');
    } catch (e) {
      err = e;
    }
    expect(isNcclNodeError(err, 'ERR_INVALID_ARGUMENT')).toBe(true);
    expect((err as Error).message).toMatch(/NCCL_NODE_GLOO_TUNING file \/t\.json is not a valid tuning table/);
    expect((err as Error).message).toMatch(why);
  });

  it('a file that is not JSON or cannot be read fails with ERR_INVALID_ARGUMENT', () => {
    const bad = file('bad.json', '{"allreduce": ');
    expect(() => loadGlooTuning({ NCCL_NODE_GLOO_TUNING: bad })).toThrow(/is not JSON/);
    expect(() => loadGlooTuning({ NCCL_NODE_GLOO_TUNING: join(dir, 'missing.json') })).toThrow(/cannot be read/);
    expect(loadGlooTuning({})).toBe('');
  });

  it('a malformed file fails init with ERR_INVALID_ARGUMENT naming the field', async () => {
    // Rank 0 fails at once; its peer loses the store rank 0 hosted and never succeeds.
    const bad = file('malformed.json', JSON.stringify({ allreduce: { 2: [{ maxBytes: -1, algorithm: 'ring' }] } }));
    const results = await runRanks<Row>('test/fixtures/gloo-tuning-rank.ts', 2, { env: { NCCL_NODE_GLOO_TUNING: bad }, timeoutMs: 30_000 });
    expect(results[0]!.code).toBe(1);
    expect(results[0]!.reports[0]).toMatchObject({ ok: false, code: 'ERR_INVALID_ARGUMENT' });
    expect(results[0]!.reports[0]!.message).toMatch(/malformed\.json is not a valid tuning table.*allreduce\.2\.0\.maxBytes/);
    expect(results[1]!.code).not.toBe(0);
    expect(results.flatMap((r) => r.reports).filter((x) => x.ok)).toEqual([]);
  }, 40_000);

  it('ranks with different tables fail init with ERR_INVALID_ARGUMENT naming both hashes; the same table works', async () => {
    const a = file('a.json', JSON.stringify(GOOD));
    const hashA = fnv1a(canonicalTuning(parseTuning(GOOD, a)));
    const hashNone = fnv1a('');
    // Several trials: which rank reads the other's hash last varies from run to run, and
    // rank 0 hosts the store, so a rank still using it when rank 0 fails would see the
    // store lost (ERR_STORE) instead of this error.
    for (let trial = 0; trial < 8; trial++) {
      const mixed = await runRanks<Row>('test/fixtures/gloo-tuning-rank.ts', 2, {
        rankEnv: (rank): Record<string, string> => (rank === 0 ? { NCCL_NODE_GLOO_TUNING: a } : {}), timeoutMs: 30_000,
      });
      for (const [rank, r] of mixed.entries()) {
        expect(r.reports[0], `trial ${trial}, rank ${rank}`).toMatchObject({ ok: false, code: 'ERR_INVALID_ARGUMENT' });
        const [mine, theirs] = rank === 0 ? [hashA, hashNone] : [hashNone, hashA];
        expect(r.reports[0]!.message).toContain(`rank ${rank} has table hash ${mine}, rank ${1 - rank} has ${theirs}`);
      }
    }
    const same = await runRanks<Row>('test/fixtures/gloo-tuning-rank.ts', 2, { env: { NCCL_NODE_GLOO_TUNING: a }, timeoutMs: 30_000 });
    expect(same.map((r) => r.reports[0])).toEqual([0, 1].map(() => ({ ok: true, gathered: [0, 10] })));
  }, 120_000);
});

describe('sweep.ts --write-tuning', () => {
  const row = (ranks: number, coll: string, size: number, addon: [number, number, number], raw: Record<string, [number, number, number]>): SweepRow => ({
    ranks, coll, size, addonUs: addon[0], addonMin: addon[1], addonMax: addon[2], bestAlgo: '', bestUs: 0, bestMin: 0, bestMax: 0,
    ratio: 0, verdict: '', raw: Object.fromEntries(Object.entries(raw).map(([k, [us, min, max]]) => [k, { us, min, max }])),
  });

  it('names a raw algorithm only where it beat the addon beyond the spread, among those the addon runs at that rank count', () => {
    const rows = [
      // 16: overlapping ranges -> auto; 64: new-ring wins clearly; 256: legacy-ring fastest but not run at 4 ranks
      row(4, 'allreduce', 16, [100, 90, 120], { 'new-ring': [95, 80, 110] }),
      row(4, 'allreduce', 64, [100, 90, 120], { 'new-ring': [50, 40, 60], 'new-bcube': [70, 60, 80] }),
      row(4, 'allreduce', 256, [100, 90, 120], { 'legacy-ring': [10, 9, 11], 'legacy-halving-doubling': [50, 40, 60] }),
      row(4, 'allreduce', 1024, [100, 90, 120], { 'legacy-halving-doubling': [50, 40, 60] }),
      row(4, 'allgather', 16, [100, 90, 120], { 'legacy-ring': [50, 40, 60], new: [70, 60, 80] }),
      row(4, 'reducescatter', 16, [10, 9, 12], { 'legacy-halving-doubling': [50, 40, 60] }),
    ];
    const t = tuningFromSweep(rows);
    expect(t.allreduce).toEqual({ 4: [
      { maxBytes: 32, algorithm: 'auto' }, { maxBytes: 128, algorithm: 'ring' }, { maxBytes: null, algorithm: 'halving-doubling' },
    ] });
    expect(t.allgather).toEqual({ 4: [{ maxBytes: null, algorithm: 'legacy-ring' }] });
    expect(t.reducescatter).toEqual({ 4: [{ maxBytes: null, algorithm: 'auto' }] });
    expect(() => parseTuning(t, 'written')).not.toThrow();
  });
});
