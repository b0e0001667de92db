/**
 * Shrink and continue: 3 Gloo ranks train TinyLM elastically; founding rank 1 hits a
 * one-off timeout at step 1 (retried) and rank 2 SIGKILLs itself before step K. The
 * survivors agree on the new membership through the store, re-form a 2-rank
 * communicator in-process and finish. Reference: plain DDP at 3 ranks for steps
 * [0, K), then from that state at 2 ranks for [K, N) (same global batch of 12): the
 * final parameters must be bit-identical, and the committed steps must consume every
 * sample id exactly once per epoch, in the loader's global order.
 */
import { describe, expect, it } from 'vitest';
import { runRanks } from '../helpers/ranks.js';
import { committedIds, config, corpus, describeRanks, expectedIds, referenceChain, SAMPLES } from './fixture.js';

const K = 4, N = 10;

describe('elastic training: shrink', () => {
  it('3 ranks, rank 2 dies before step 4: the survivors shrink to 2 and match the 3-then-2-rank reference exactly', async () => {
    const cfg = config(await corpus(), N);
    const t0 = performance.now();
    const rs = await runRanks<{ decisions: { action: string; ms: number; roundMs?: number }[]; size: number; metrics: string }>('test/ft/worker.ts', 3, {
      payload: { cfg, windowMs: 1500, timeoutMs: 15_000, dieRank: 2, dieAt: K, timeoutRank: 1, timeoutAt: 1 },
      timeoutMs: 50_000,
    });
    const wall = performance.now() - t0;
    const why = describeRanks(rs);
    expect(rs[2]!.signal, why).toBe('SIGKILL');
    for (const r of rs.slice(0, 2)) {
      expect(r.code, why).toBe(0);
      expect(r.result!.size).toBe(2);
    }
    // The ladder: rank 1 retried its timeout once; both survivors shrank once.
    expect(rs[0]!.result!.decisions.map((d) => d.action)).toEqual(['shrink']);
    expect(rs[1]!.result!.decisions.map((d) => d.action)).toEqual(['retry', 'shrink']);
    expect(rs[0]!.result!.metrics).toMatch(/nccl_node_ft_decisions_total\{action="shrink"\} 1/);
    const shrinkMs = rs.slice(0, 2).map((r) => r.result!.decisions.at(-1)!.ms);
    const roundMs = rs.slice(0, 2).map((r) => r.result!.decisions.at(-1)!.roundMs!);
    console.log(`shrink cost ms: ${shrinkMs.map((m) => m.toFixed(1)).join(', ')}, of which round ms: ${roundMs.map((m) => m.toFixed(1)).join(', ')} (window 1500 ms); retry cost ms: ${rs[1]!.result!.decisions[0]!.ms.toFixed(1)}; run wall ${wall.toFixed(0)} ms`);
    // The dead member is known gone (its process is), so the round does not wait out the window for it.
    for (const ms of roundMs) expect(ms).toBeLessThan(1500 / 3);

    // Survivors agree with each other and with the reference, bit for bit.
    expect(rs[1]!.arrays).toEqual(rs[0]!.arrays);
    const ref = await referenceChain(cfg, [{ size: 3, from: 0, to: K }, { size: 2, from: K, to: N }]);
    const got = rs[0]!.arrays!;
    expect(Array.from(ref.params.subarray(0, got.length))).toEqual(Array.from(got));

    // Every committed step took the global batch of the loader's order; every id once per epoch.
    const ids = committedIds(rs);
    expect([...ids.keys()].sort((a, b) => a - b)).toEqual(Array.from({ length: N }, (_, i) => i));
    const flat = Array.from({ length: N }, (_, s) => ids.get(s)!).flat();
    expect(flat).toEqual(expectedIds(N, cfg.dataSeed, cfg.globalBatch));
    for (let e = 0; e < Math.floor(flat.length / SAMPLES); e++) {
      expect([...flat.slice(e * SAMPLES, (e + 1) * SAMPLES)].sort((a, b) => a - b)).toEqual(Array.from({ length: SAMPLES }, (_, i) => i));
    }
    for (const [s, v] of ids) expect(v, `step ${s}`).toEqual(ref.ids.get(s));
  }, 60_000);
});
