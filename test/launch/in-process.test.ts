/**
 * Recovery without restarting the world, under the launcher: `nccl-node run
 * --restart-scope rank` with 3 ranks training TinyLM elastically (trainElastic,
 * fixtures/ft-elastic.mts). Founding rank 1 fails before step K on its first life:
 * (a) it SIGKILLs itself; (b) it SIGSTOPs itself and the launcher's heartbeat monitor
 * names it and kills it. The launcher restarts only rank 1, which rejoins the group
 * (ElasticGroup.start joins when told it is a restarted rank) and receives the state
 * live; the survivors are never restarted. Reference: plain DDP at 3 ranks for [0, K),
 * 2 for [K, J), 3 for [J, N), each leg from the previous one's state, where J is the
 * step at which the group grew back (from the ranks' reports): the final parameters of
 * every rank must be bit-identical to it, and every step's sample ids must be the
 * loader's global order.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveOptions } from '../../src/launch/options.js';
import type { RankResult } from '../helpers/ranks.js';
import { launchRankScope, readRecords as read, ROOT, tail, type RankScopeRun } from '../helpers/rank-scope.js';
import { committedIds, config, corpus, expectedIds, referenceChain } from '../ft/fixture.js';

const FIXTURE = 'test/launch/fixtures/ft-elastic.mts';
const K = 3, GROW_AT = 5, N = 8;

interface Report { step: number; ids: number[]; gen: number; size: number; rank: number }
interface End { rank: number; pid: number; restarts: number; reports: Report[]; size: number; decisions: { action: string; ms: number }[]; params: string }
interface Start { rank: number; pid: number; restarts: number; rejoin: boolean }

function launch(fault: 'kill' | 'stop' | 'exit75', cfg: ReturnType<typeof config>, maxRestarts = 2): Promise<RankScopeRun> {
  const payload = { cfg, windowMs: 1000, timeoutMs: 20_000, faultRank: 1, faultAt: K, fault, growAt: GROW_AT };
  return launchRankScope({ script: FIXTURE, nproc: 3, payload, maxRestarts, deadlineMs: 40_000 });
}

describe('nccl-node run --restart-scope rank', () => {
  for (const fault of ['kill', 'stop'] as const) {
    it(`rank 1 ${fault === 'kill' ? 'SIGKILLs' : 'SIGSTOPs'} itself: only it is restarted, it rejoins, and all match the 3-2-3 reference exactly`, async () => {
      const cfg = config(await corpus(), N);
      const run = await launch(fault, cfg);
      const why = tail(run.stderr);
      expect(run.code, why).toBe(0);
      expect(run.stderr).not.toMatch(/restarting the gang/);
      const starts = read<Start>(run.out, 'start');
      const lives = (r: number): Start[] => starts.filter((s) => s.rank === r).sort((a, b) => a.restarts - b.restarts);
      // One restart, of rank 1's first life, named with its pid and the cause.
      expect(run.stderr.match(/restarting rank/g)).toHaveLength(1);
      const first = lives(1)[0]!.pid;
      if (fault === 'stop') expect(run.stderr).toContain(`rank 1 (pid ${first}) missed heartbeats`);
      expect(run.stderr).toMatch(fault === 'kill' ? new RegExp(`rank 1 \\(pid ${first}\\) was killed by signal SIGKILL; restarting rank 1 \\(restart 1 of 2\\)`)
        : new RegExp(`rank 1 \\(pid ${first}\\) missed heartbeats.*; restarting rank 1 \\(restart 1 of 2\\)`));

      // Survivors lived once; rank 1 twice, the second life told to rejoin.
      expect(lives(0)).toHaveLength(1);
      expect(lives(2)).toHaveLength(1);
      expect(lives(1).map((s) => [s.restarts, s.rejoin])).toEqual([[0, false], [1, true]]);
      const ends = read<End>(run.out, 'end');
      expect(ends.map((e) => e.pid).sort()).toEqual([lives(0)[0]!.pid, lives(1)[1]!.pid, lives(2)[0]!.pid].sort());
      for (const e of ends) expect(e.size).toBe(3);

      // The sizes actually used: 3 before K, 2 until the group grew back at J, then 3.
      const survivor = ends.find((e) => e.rank === 0)!;
      const sizes = Array.from({ length: N }, (_, s) => survivor.reports.filter((x) => x.step === s).at(-1)?.size);
      const J = sizes.findIndex((s, i) => i >= K && s === 3);
      expect(J).toBeGreaterThanOrEqual(K);
      expect(J).toBeLessThanOrEqual(GROW_AT);
      expect(sizes).toEqual(Array.from({ length: N }, (_, s) => (s < K || s >= J ? 3 : 2)));
      const restarted = ends.find((e) => e.rank === 1)!;
      expect(restarted.reports.map((x) => x.step)).toEqual(Array.from({ length: N - J }, (_, i) => J + i));
      console.log(`${fault}: grew back at step ${J}; rank 0's decisions ${JSON.stringify(survivor.decisions)}`);

      const ref = await referenceChain(cfg, [{ size: 3, from: 0, to: K }, { size: 2, from: K, to: J }, { size: 3, from: J, to: N }].filter((l) => l.from < l.to));
      for (const e of ends) {
        const got = new Float32Array(new Uint8Array(Buffer.from(e.params, 'base64')).buffer);
        expect(Array.from(got), `rank ${e.rank}`).toEqual(Array.from(ref.params.subarray(0, got.length)));
      }
      // Every life's committed steps (rank 1's first life too), each step's ids in group-rank order.
      const steps = readdirSync(run.out).filter((f) => f.startsWith('steps-'))
        .flatMap((f) => readFileSync(path.join(run.out, f), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Report));
      const ids = committedIds([0, 1, 2].map((g) => ({ reports: steps.filter((x) => x.rank === g) }) as unknown as RankResult));
      expect(Array.from({ length: N }, (_, s) => ids.get(s)!).flat()).toEqual(expectedIds(N, cfg.dataSeed, cfg.globalBatch));
      for (const [s, v] of ids) expect(v, `step ${s}`).toEqual(ref.ids.get(s));
    }, 60_000);
  }

  it('falls back to the gang path for exit code 75 and when restarts are used up', async () => {
    const cfg = config(await corpus(), N);
    // 75 (EXIT_FULL_RESTART): the gang restarts; its new rank 1 is on a first life again, exits 75 again, and that ends the job.
    const full = await launch('exit75', cfg, 1);
    expect(full.code, full.stderr).toBe(75);
    expect(full.stderr).toMatch(/attempt 0 failed: rank 1 \(pid \d+\) exited with code 75; stopped ranks 0, 2; restarting the gang \(restart 1 of 1\)/);
    expect(full.stderr).not.toMatch(/restarting rank/);
    expect(read<Start>(full.out, 'start')).toHaveLength(6);
    // No restarts left: a SIGKILL stops the gang and ends the job with 128 + 9.
    const none = await launch('kill', cfg, 0);
    expect(none.code, none.stderr).toBe(137);
    expect(none.stderr).toMatch(/rank 1 \(pid \d+\) was killed by signal SIGKILL; stopping ranks 0, 2/);
    expect(none.stderr).not.toMatch(/restarting/);
    expect(() => resolveOptions({ script: FIXTURE, cwd: ROOT, nprocPerNode: 1, restartScope: 'node' as 'rank' })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT' }));
  }, 40_000);
});
