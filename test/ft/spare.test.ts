/**
 * In-place restart with a spare: 3 founding Gloo ranks and a spare that registered at
 * start. Rank 2 SIGKILLs itself before step K; the round comes up one short, admits
 * the spare in its place, rank 0 sends it the live state, and the group continues at 3.
 * Reference: a plain 3-rank DDP run of all N steps that never failed: the final
 * parameters must be bit-identical on all three processes, and the spare must have
 * trained steps K..N-1 as rank 2.
 */
import { describe, expect, it } from 'vitest';
import { runRanks } from '../helpers/ranks.js';
import { committedIds, config, corpus, describeRanks, expectedIds, referenceChain } from './fixture.js';

const K = 3, N = 7;

describe('elastic training: spare', () => {
  it('a spare replaces the lost rank at the same size and the run equals one that never failed', async () => {
    const cfg = config(await corpus(), N);
    const rs = await runRanks<{ decisions: { action: string; ms: number; roundMs: number; transferBytes: number }[]; size: number }>('test/ft/worker.ts', 4, {
      payload: { cfg, windowMs: 1500, timeoutMs: 15_000, dieRank: 2, dieAt: K },
      rankEnv: (r): Record<string, string> => (r === 3 ? { FT_ROLE: 'spare' } : { WORLD_SIZE: '3', LOCAL_WORLD_SIZE: '3' }),
      timeoutMs: 50_000,
    });
    const why = describeRanks(rs);
    expect(rs[2]!.signal, why).toBe('SIGKILL');
    for (const r of [rs[0]!, rs[1]!, rs[3]!]) {
      expect(r.code, why).toBe(0);
      expect(r.result!.size).toBe(3);
    }
    const d = rs[0]!.result!.decisions;
    expect(d.map((x) => x.action)).toEqual(['restart-in-place']);
    expect(d[0]!.transferBytes).toBeGreaterThan(0);
    console.log(`restart in place: ${JSON.stringify(d[0])}`);
    // Short by a member known gone (its process exited): the spare is admitted at once, not after the window.
    expect(d[0]!.roundMs).toBeLessThan(1500 / 3);
    const spareSteps = rs[3]!.reports.filter((x) => x.step !== undefined);
    expect(spareSteps.map((x) => x.step)).toEqual(Array.from({ length: N - K }, (_, i) => K + i));
    expect(spareSteps.every((x) => x.rank === 2)).toBe(true);

    expect(rs[1]!.arrays).toEqual(rs[0]!.arrays);
    expect(rs[3]!.arrays).toEqual(rs[0]!.arrays);
    const ref = await referenceChain(cfg, [{ size: 3, from: 0, to: N }]);
    const got = rs[0]!.arrays!;
    expect(Array.from(ref.params.subarray(0, got.length))).toEqual(Array.from(got));
    const ids = committedIds(rs);
    expect(Array.from({ length: N }, (_, s) => ids.get(s)!).flat()).toEqual(expectedIds(N, cfg.dataSeed, cfg.globalBatch));
  }, 60_000);
});
