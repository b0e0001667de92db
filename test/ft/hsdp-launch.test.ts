/**
 * Elastic HSDP under the launcher: `nccl-node run --restart-scope rank` with 4 ranks as
 * 2 replicas x 2 shards (test/ft/hsdp-launch-worker.ts). Founding rank 2 SIGKILLs
 * itself before step K on its first life; the launcher restarts rank 2 alone, the new
 * process joins the group (ElasticGroup.start joins when told it is a restarted rank),
 * takes back slot 2 and receives shard 0 live. Replica 0 never stops. Reference: plain
 * HSDP legs at 2 x 2 for [0, K), 1 x 2 for [K, J), 2 x 2 for [J, N), where J is the step
 * at which the replica came back (from the reports): the final full parameters of every
 * rank must be bit-identical to it; every step's ids, in data-parallel rank order, the
 * loader's global order.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { launchRankScope, readRecords, tail } from '../helpers/rank-scope.js';
import { config, corpus, expectedIds } from './fixture.js';
import { hsdpReferenceChain } from './hsdp-fixture.js';

const K = 2, GROW_AT = 4, N = 7;

interface Step { step: number; ids: number[]; dpRank: number; dpSize: number; slot: number }
interface End { rank: number; pid: number; restarts: number; slot: number; decisions: { action: string; size: number; transferBytes: number }[]; params: string }
interface Start { rank: number; pid: number; restarts: number; rejoin: boolean }

describe('elastic HSDP under nccl-node run --restart-scope rank', () => {
  it('rank 2 is killed: only it is restarted, its replica comes back with its shard, and all ranks match the 2x2 / 1x2 / 2x2 legs exactly', async () => {
    const cfg = { ...config(await corpus(), N), hsdp: { shard: 2 } };
    const payload = { cfg, windowMs: 1000, timeoutMs: 20_000, faultRank: 2, faultAt: K, growAt: GROW_AT };
    const { code, stderr, out } = await launchRankScope({ script: 'test/ft/hsdp-launch-worker.ts', nproc: 4, payload });
    const why = tail(stderr);
    expect(code, why).toBe(0);
    expect(stderr.match(/restarting rank/g)).toHaveLength(1);
    expect(stderr).not.toMatch(/restarting the gang/);
    const read = <T>(kind: string): T[] => readRecords<T>(out, kind);
    const starts = read<Start>('start');
    const lives = (r: number) => starts.filter((s) => s.rank === r).sort((a, b) => a.restarts - b.restarts);
    for (const r of [0, 1, 3]) expect(lives(r)).toHaveLength(1);
    expect(lives(2).map((s) => [s.restarts, s.rejoin])).toEqual([[0, false], [1, true]]);
    const ends = read<End>('end').sort((a, b) => a.rank - b.rank);
    expect(ends.map((e) => [e.rank, e.slot])).toEqual([[0, 0], [1, 1], [2, 2], [3, 3]]);
    expect(ends[2]!.pid).toBe(lives(2)[1]!.pid);

    const steps = readdirSync(out).filter((f) => f.startsWith('steps-')).flatMap((f) => readFileSync(path.join(out, f), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Step));
    const sizes = Array.from({ length: N }, (_, s) => steps.filter((x) => x.step === s && x.dpRank === 0).map((x) => x.dpSize));
    const J = sizes.findIndex((v, i) => i >= K && v[0] === 4);
    expect(J).toBeGreaterThan(K);
    expect(J).toBeLessThanOrEqual(GROW_AT);
    expect(sizes).toEqual(Array.from({ length: N }, (_, s) => [s < K || s >= J ? 4 : 2]));
    for (const e of ends.filter((x) => x.rank !== 2)) expect(e.decisions.map((d) => [d.action, d.size])).toEqual([['shrink', 2], ['grow', 4]]);
    console.log(`launcher HSDP: replica back at step ${J}; rank 0: ${JSON.stringify(ends[0]!.decisions)}`);

    const ref = await hsdpReferenceChain(cfg, [{ size: 4, from: 0, to: K }, { size: 2, from: K, to: J }, { size: 4, from: J, to: N }]);
    for (const e of ends) {
      const got = new Float32Array(new Uint8Array(Buffer.from(e.params, 'base64')).buffer);
      expect(Array.from(got), `rank ${e.rank}`).toEqual(Array.from(ref.params));
    }
    const byStep = Array.from({ length: N }, (_, s) => steps.filter((x) => x.step === s).sort((a, b) => a.dpRank - b.dpRank).flatMap((x) => x.ids));
    expect(byStep.flat()).toEqual(expectedIds(N, cfg.dataSeed, cfg.globalBatch));
    for (let s = 0; s < N; s++) expect(byStep[s], `step ${s}`).toEqual(ref.ids.get(s));
  }, 60_000);
});
