/**
 * A wrong "gone" report does not corrupt a membership round: 3 Gloo ranks; before
 * step K founding rank 0 fails its step with an ERR_PEER_LOST naming founding rank 2,
 * which is alive but sleeps through the round. Ranks 0 and 1 close the round at once
 * (2 checked in + 1 reported gone = 3 expected) and continue at 2; rank 2 checks in
 * after the close, is refused, registers as a joiner and is taken back at a step
 * boundary (rank 0 waits for it after step GROW_AT - 1 at the latest). Every process
 * ends in the same generation with the same member list; the final parameters equal a
 * plain DDP chain at 3 ranks for [0, K), 2 for [K, J), 3 for [J, N), J being the step
 * at which the group grew back (from the ranks' reports).
 */
import { describe, expect, it } from 'vitest';
import { runRanks } from '../helpers/ranks.js';
import { committedIds, config, corpus, describeRanks, expectedIds, referenceChain } from './fixture.js';

const K = 3, GROW_AT = 6, N = 8;
const WINDOW = 1500;

interface Result { decisions: { action: string; ms: number; roundMs?: number; generation?: number }[]; size: number; generation: number; rank: number }

describe('elastic training: a member wrongly reported gone', () => {
  it('the round closes without it, it rejoins at a step boundary, and all match the 3-2-3 reference', async () => {
    const cfg = config(await corpus(), N);
    const rs = await runRanks<Result>('test/ft/worker.ts', 3, {
      payload: { cfg, windowMs: WINDOW, timeoutMs: 15_000, joinAt: GROW_AT, falseLost: { reporter: 0, victim: 2, at: K, slowMs: 800 } },
      timeoutMs: 50_000,
    });
    const why = describeRanks(rs);
    for (const r of rs) expect(r.code, why).toBe(0);
    // One membership at the end: same generation, size 3, ranks 0..2 once each.
    const ends = rs.map((r) => r.result!);
    expect(new Set(ends.map((e) => e.generation)).size, why).toBe(1);
    expect(ends.map((e) => e.size)).toEqual([3, 3, 3]);
    expect(ends.map((e) => e.rank).sort()).toEqual([0, 1, 2]);

    // The survivors shrank without waiting for the window, then grew back.
    const d0 = ends[0]!.decisions;
    expect(d0.map((d) => d.action)).toEqual(['shrink', 'grow']);
    expect(d0[0]!.roundMs!).toBeLessThan(WINDOW / 3);
    // The reported member was refused and came back as a joiner (same size as its old group).
    expect(ends[2]!.decisions.map((d) => d.action)).toEqual(['restart-in-place']);
    console.log(`wrongly reported: survivors' shrink round ${d0[0]!.roundMs!.toFixed(1)} ms (window ${WINDOW}); rank 2 back after ${ends[2]!.decisions[0]!.ms.toFixed(0)} ms`);

    const sizes = Array.from({ length: N }, (_, s) => rs[0]!.reports.filter((x) => x.step === s).at(-1)?.size as number);
    const J = sizes.findIndex((s, i) => i > K && s === 3);
    expect(J).toBeGreaterThan(K);
    expect(J).toBeLessThanOrEqual(GROW_AT);
    expect(sizes).toEqual(Array.from({ length: N }, (_, s) => (s < K || s >= J ? 3 : 2)));
    expect(rs[1]!.arrays).toEqual(rs[0]!.arrays);
    expect(rs[2]!.arrays).toEqual(rs[0]!.arrays);
    const ref = await referenceChain(cfg, [{ size: 3, from: 0, to: K }, { size: 2, from: K, to: J }, { size: 3, from: J, to: N }]);
    const got = rs[0]!.arrays!;
    expect(Array.from(ref.params.subarray(0, got.length))).toEqual(Array.from(got));
    const ids = committedIds(rs);
    expect(Array.from({ length: N }, (_, s) => ids.get(s)!).flat()).toEqual(expectedIds(N, cfg.dataSeed, cfg.globalBatch));
  }, 60_000);
});
