/**
 * Rejoin with live state transfer: 3 founding Gloo ranks; rank 2 SIGKILLs itself
 * before step K, the survivors shrink to 2; a new process (a restarted rank) registers
 * after K + 2 steps are committed and is admitted at that step boundary: rank 0 sends
 * it parameters, AdamW moments and step count, loader position and RNG state over the
 * new 3-rank communicator (no disk), and the three finish. Reference: plain DDP at 3
 * ranks for [0, K), 2 ranks for [K, K + 2), 3 ranks for [K + 2, N), each leg from the
 * previous one's state: final parameters bit-identical on all three processes.
 */
import { describe, expect, it } from 'vitest';
import { runRanks } from '../helpers/ranks.js';
import { committedIds, config, corpus, describeRanks, expectedIds, referenceChain } from './fixture.js';

const K = 3, J = K + 2, N = 9;

describe('elastic training: rejoin', () => {
  it('a new process joins at step K+2, receives the state live, and the group of 3 matches the 3-2-3 reference exactly', async () => {
    const cfg = config(await corpus(), N);
    const rs = await runRanks<{ decisions: { action: string; ms: number }[]; size: number; generation: number }>('test/ft/worker.ts', 4, {
      payload: { cfg, windowMs: 1500, timeoutMs: 15_000, dieRank: 2, dieAt: K, joinAt: J },
      rankEnv: (r): Record<string, string> => (r === 3 ? { FT_ROLE: 'joiner' } : { WORLD_SIZE: '3', LOCAL_WORLD_SIZE: '3' }),
      timeoutMs: 50_000,
    });
    const why = describeRanks(rs);
    expect(rs[2]!.signal, why).toBe('SIGKILL');
    for (const r of [rs[0]!, rs[1]!, rs[3]!]) {
      expect(r.code, why).toBe(0);
      expect(r.result!.size).toBe(3);
      expect(r.result!.generation).toBe(2);
    }
    expect(rs[0]!.result!.decisions.map((d) => d.action)).toEqual(['shrink', 'grow']);
    // The joiner ran only steps J..N-1, as the new rank 2.
    const joinedSteps = rs[3]!.reports.filter((x) => x.step !== undefined).map((x) => x.step);
    expect(joinedSteps).toEqual(Array.from({ length: N - J }, (_, i) => J + i));
    expect(rs[3]!.reports.filter((x) => x.step !== undefined).every((x) => x.rank === 2)).toBe(true);
    const grow = rs.slice(0, 2).map((r) => r.result!.decisions[1]!.ms);
    console.log(`grow: ${JSON.stringify(rs.slice(0, 2).map((r) => r.result!.decisions[1]))}; joiner formed: ${JSON.stringify(rs[3]!.reports[0])}; shrink: ${JSON.stringify(rs[0]!.result!.decisions[0])}`);

    // Only the joiner was behind: rank 0 sent it one frame, rank 1 kept its own state.
    const sent = rs[0]!.result!.decisions[1] as unknown as { transferBytes: number };
    expect(sent.transferBytes).toBeGreaterThan(4 * 3 * rs[0]!.arrays!.length);
    expect((rs[1]!.result!.decisions[1] as unknown as { transferBytes: number }).transferBytes).toBe(0);
    expect(rs[1]!.arrays).toEqual(rs[0]!.arrays);
    expect(rs[3]!.arrays).toEqual(rs[0]!.arrays);
    const ref = await referenceChain(cfg, [{ size: 3, from: 0, to: K }, { size: 2, from: K, to: J }, { size: 3, from: J, to: N }]);
    const got = rs[0]!.arrays!;
    expect(Array.from(ref.params.subarray(0, got.length))).toEqual(Array.from(got));

    const ids = committedIds(rs);
    const flat = Array.from({ length: N }, (_, s) => ids.get(s)!).flat();
    expect(flat).toEqual(expectedIds(N, cfg.dataSeed, cfg.globalBatch));
    for (const [s, v] of ids) expect(v, `step ${s}`).toEqual(ref.ids.get(s));
  }, 60_000);
});
