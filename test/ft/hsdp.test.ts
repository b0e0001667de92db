/**
 * Elastic HSDP: 2 replicas x 2 shards (FSDP ZeRO-3 in each shard group), 4 founding
 * Gloo ranks. Founding rank 2 (replica 1, shard 0) SIGKILLs itself before step K:
 * replica 0 goes on alone at the same global batch while founding rank 3 (replica 1,
 * shard 1) is parked with its shard. A restarted process registers after J steps are
 * committed and is admitted at that boundary: it takes the empty slot, receives shard 0
 * from replica 0's shard 0, founding rank 3 receives the newer shard 1 from replica 0's
 * shard 1 (live, no disk), and both replicas finish.
 *
 * Reference: plain HSDP (DeviceMesh + FSDP, no src/ft code) run as chained legs at the
 * mesh shapes the run went through: 2 x 2 for [0, K), 1 x 2 for [K, J), 2 x 2 for
 * [J, N), each from the previous leg's state. The full gathered parameters must be
 * bit-identical on all four finishing processes and to the reference; every step's
 * sample ids, in data-parallel rank order, must be the loader's global order.
 *
 * With a spare registered at start, the round that finds the rank gone admits the
 * spare into the empty slot at once: the replica never leaves, the spare receives
 * shard 0, and the run equals a plain 2 x 2 HSDP run that never failed.
 */
import { describe, expect, it } from 'vitest';
import { runRanks, type RankResult } from '../helpers/ranks.js';
import { config, corpus, describeRanks, expectedIds } from './fixture.js';
import { hsdpReferenceChain as referenceChain } from './hsdp-fixture.js';
import type { HsdpPayload } from './hsdp-worker.js';

const K = 2, J = 4, N = 7, S = 2;

type Step = { step: number; ids: number[]; gen: number; dpRank: number; dpSize: number; slot: number };
const stepsOf = (r: RankResult) => r.reports.filter((x) => x.step !== undefined) as unknown as Step[];

describe('elastic training: HSDP', () => {
  it('2 replicas x 2 shards: a lost rank takes its replica out, the restarted rank rejoins with its shard, and the run equals the 2x2 / 1x2 / 2x2 HSDP legs exactly', async () => {
    const cfg = { ...config(await corpus(), N), hsdp: { shard: S } };
    const rs = await runRanks<{ decisions: { action: string; ms: number; size: number; transferBytes: number; roundMs: number }[]; generation: number; slot: number }>('test/ft/hsdp-worker.ts', 5, {
      payload: { cfg, windowMs: 1500, timeoutMs: 15_000, dieRank: 2, dieAt: K, joinAt: J } satisfies HsdpPayload,
      // The fifth process is the restarted founding rank 2.
      rankEnv: (r): Record<string, string> => (r === 4 ? { FT_ROLE: 'joiner', RANK: '2' } : { WORLD_SIZE: '4', LOCAL_WORLD_SIZE: '4' }),
      timeoutMs: 55_000,
    });
    const why = describeRanks(rs);
    expect(rs[2]!.signal, why).toBe('SIGKILL');
    const finished = [rs[0]!, rs[1]!, rs[3]!, rs[4]!];
    for (const r of finished) {
      expect(r.code, why).toBe(0);
      expect(r.result!.generation).toBe(2);
    }
    expect(finished.map((r) => r.result!.slot)).toEqual([0, 1, 3, 2]);

    // Sizes per step: 4 data-parallel ranks, then replica 0 alone (2), then 4 again.
    const range = (a: number, b: number) => Array.from({ length: b - a }, (_, i) => a + i);
    expect(stepsOf(rs[0]!).map((x) => [x.step, x.dpSize, x.dpRank])).toEqual(range(0, N).map((s) => [s, s >= K && s < J ? 2 : 4, 0]));
    expect(stepsOf(rs[1]!).map((x) => [x.step, x.dpSize, x.dpRank])).toEqual(range(0, N).map((s) => [s, s >= K && s < J ? 2 : 4, 1]));
    // The broken replica's survivor is parked from K to J, then trains as data-parallel rank 3 again.
    expect(stepsOf(rs[3]!).map((x) => [x.step, x.dpSize, x.dpRank])).toEqual([...range(0, K), ...range(J, N)].map((s) => [s, 4, 3]));
    expect(stepsOf(rs[2]!).map((x) => x.step)).toEqual(range(0, K));
    expect(stepsOf(rs[4]!).map((x) => [x.step, x.dpSize, x.dpRank, x.slot])).toEqual(range(J, N).map((s) => [s, 4, 2, 2]));

    // The ladder on every member of the old generation: shrink to 2, grow back to 4.
    for (const r of [rs[0]!, rs[1]!, rs[3]!]) expect(r.result!.decisions.map((d) => [d.action, d.size])).toEqual([['shrink', 2], ['grow', 4]]);
    console.log(`HSDP recovery: ${JSON.stringify(finished.map((r) => r.result!.decisions.map((d) => ({ a: d.action, ms: Math.round(d.ms), roundMs: Math.round(d.roundMs), bytes: d.transferBytes }))))}`);
    // The dead member's process is gone, so the shrink round does not wait out the 1500 ms window.
    for (const r of [rs[0]!, rs[1]!, rs[3]!]) expect(r.result!.decisions[0]!.roundMs).toBeLessThan(500);
    // The shrink moved no bytes; at the grow replica 0 sent both shards, the parked rank received its newer shard 1.
    for (const r of [rs[0]!, rs[1]!, rs[3]!]) expect(r.result!.decisions[0]!.transferBytes).toBe(0);
    const grow = [rs[0]!, rs[1]!, rs[3]!].map((r) => r.result!.decisions[1]!.transferBytes);
    expect(grow.every((b) => b > 0), JSON.stringify(grow)).toBe(true);
    expect(grow[2]).toBe(grow[1]);

    for (const r of finished.slice(1)) expect(r.arrays, 'replicas and shards agree').toEqual(rs[0]!.arrays);
    const ref = await referenceChain(cfg, [{ size: 4, from: 0, to: K }, { size: 2, from: K, to: J }, { size: 4, from: J, to: N }]);
    expect(rs[0]!.arrays!.length).toBe(ref.params.length);
    expect(Array.from(rs[0]!.arrays!)).toEqual(Array.from(ref.params));

    // Every step's ids, in data-parallel rank order, are the loader's global order and the reference's.
    const all = finished.concat([rs[2]!]).flatMap(stepsOf);
    const byStep = range(0, N).map((s) => all.filter((x) => x.step === s).sort((a, b) => a.dpRank - b.dpRank).flatMap((x) => x.ids));
    expect(byStep.flat()).toEqual(expectedIds(N, cfg.dataSeed, cfg.globalBatch));
    for (let s = 0; s < N; s++) expect(byStep[s], `step ${s}`).toEqual(ref.ids.get(s));
  }, 90_000);

  it('2 replicas x 2 shards with a spare: the spare fills the lost slot in the same round and the run equals an unbroken 2x2 run', async () => {
    const cfg = { ...config(await corpus(), N), hsdp: { shard: S } };
    const rs = await runRanks<{ decisions: { action: string; size: number; transferBytes: number; roundMs: number }[]; slot: number }>('test/ft/hsdp-worker.ts', 5, {
      payload: { cfg, windowMs: 1500, timeoutMs: 15_000, dieRank: 1, dieAt: K } satisfies HsdpPayload,
      rankEnv: (r): Record<string, string> => (r === 4 ? { FT_ROLE: 'spare' } : { WORLD_SIZE: '4', LOCAL_WORLD_SIZE: '4' }),
      timeoutMs: 55_000,
    });
    const why = describeRanks(rs);
    expect(rs[1]!.signal, why).toBe('SIGKILL');
    const finished = [rs[0]!, rs[2]!, rs[3]!, rs[4]!];
    for (const r of finished) expect(r.code, why).toBe(0);
    expect(finished.map((r) => r.result!.slot)).toEqual([0, 2, 3, 1]);
    const range = (a: number, b: number) => Array.from({ length: b - a }, (_, i) => a + i);
    for (const r of [rs[0]!, rs[2]!, rs[3]!]) {
      expect(stepsOf(r).every((x) => x.dpSize === 4)).toBe(true);
      expect(stepsOf(r).map((x) => x.step)).toEqual(range(0, N));
      expect(r.result!.decisions.map((d) => [d.action, d.size])).toEqual([['restart-in-place', 4]]);
    }
    expect(stepsOf(rs[4]!).map((x) => [x.step, x.dpRank])).toEqual(range(K, N).map((s) => [s, 1]));
    // Only shard 1 moved: founding rank 3 sent it, the others kept theirs.
    expect(rs[3]!.result!.decisions[0]!.transferBytes).toBeGreaterThan(0);
    expect(rs[0]!.result!.decisions[0]!.transferBytes).toBe(0);
    expect(rs[2]!.result!.decisions[0]!.transferBytes).toBe(0);
    expect(rs[0]!.result!.decisions[0]!.roundMs).toBeLessThan(500);
    console.log(`HSDP spare: ${JSON.stringify([rs[0]!, rs[3]!].map((r) => r.result!.decisions[0]))}`);
    for (const r of finished.slice(1)) expect(r.arrays).toEqual(rs[0]!.arrays);
    const ref = await referenceChain(cfg, [{ size: 4, from: 0, to: N }]);
    expect(Array.from(rs[0]!.arrays!)).toEqual(Array.from(ref.params));
  }, 90_000);
});
