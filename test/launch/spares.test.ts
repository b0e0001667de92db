/**
 * Process-level hot spares: `nccl-node run --restart-scope rank --spares 1` with 3 ranks
 * training TinyLM elastically (fixtures/ft-spares.mts). Rank 1 SIGKILLs itself before
 * step K while spare s0 is registered: the survivors' round is short by a member known
 * gone and admits s0 in its place (membership.ts onShort), so every step runs at 3 (no
 * shrink); the launcher adopts s0 as rank 1 and starts s1. The process that took rank 1
 * then SIGKILLs itself before step K2 and s1 takes its place. Reference: plain 3-rank DDP
 * of all N steps (the chain of test/ft/fixture.ts): the final parameters of every process
 * must be bit-identical to it. Also timed: from the kill to the first committed step at
 * full size, against the same run without spares (the restarted rank rejoins; 3/2/3).
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Member } from '../../src/ft/membership.js';
import { resolveOptions } from '../../src/launch/options.js';
import { spareTakes } from '../../src/launch/spares.js';
import { config, corpus, referenceChain } from '../ft/fixture.js';
import { launchRankScope, readRecords as read, ROOT, type RankScopeRun } from '../helpers/rank-scope.js';

const BIN = path.join(ROOT, 'bin/nccl-node.js');
const FIXTURE = 'test/launch/fixtures/ft-spares.mts';
const K = 3, K2 = 6, N = 9;

interface Report { step: number; ids: number[]; gen: number; size: number; rank: number; t: number }
interface Start { envRank: number; pid: number; spare: number | null; restarts: number }
interface End { rank: number; life: number; pid: number; spare: number | null; reports: Report[]; size: number; params: string }
interface Kill { rank: number; life: number; pid: number; t: number }
type Kills = { rank: number; life: number; at: number; spare?: number }[];

function launch(args: string[], cfg: ReturnType<typeof config>, kills: Kills): Promise<RankScopeRun> {
  const payload = { cfg, windowMs: 1000, timeoutMs: 20_000, kills };
  return launchRankScope({ script: FIXTURE, nproc: 3, payload, args: ['--prefix', ...args], deadlineMs: 50_000 });
}

function steps(dir: string, pid: number): Report[] {
  return readFileSync(path.join(dir, `steps-${pid}.jsonl`), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Report);
}

/** ms from each kill to the first step committed at full size after it (by founding rank 0's process). */
function toFullSize(dir: string, rank0: number, founding: number): number[] {
  const rs = steps(dir, rank0);
  return read<Kill>(dir, 'kill').sort((a, b) => a.t - b.t).map((k) => rs.find((r) => r.t > k.t && r.size === founding)!.t - k.t);
}

function stillThere(pids: number[]): string {
  return spawnSync('ps', ['-o', 'pid=,args=', '-p', pids.join(',')], { encoding: 'utf8' }).stdout.trim();
}

function why(run: { stderr: string }): string {
  return run.stderr.split('\n').filter((l) => !l.startsWith('{') && !/^\[\S+\] \{/.test(l)).slice(-40).join('\n');
}

describe('nccl-node run --spares', () => {
  it('a spare takes a killed rank\'s place at full size, a new spare takes the next, and the result equals plain 3-rank DDP', async () => {
    const cfg = config(await corpus(), N);
    const run = await launch(['--spares', '1'], cfg, [{ rank: 1, life: 0, at: K, spare: 0 }, { rank: 1, life: 1, at: K2, spare: 1 }]);
    expect(run.code, why(run)).toBe(0);
    expect(run.stderr).not.toMatch(/restarting the gang|restarting rank|held no rank/);
    const starts = read<Start>(run.out, 'start');
    const founders = starts.filter((s) => s.spare === null);
    // No rank was started again: the three founders, and spares s0, s1 (replacing s0), s2 (replacing s1).
    expect(founders.map((s) => s.envRank).sort()).toEqual([0, 1, 2]);
    // (s2 may be ended before its script writes anything: the job can finish first.)
    expect(starts.map((s) => s.spare).filter((x) => x !== null).sort()).toEqual(expect.arrayContaining([0, 1]));
    const spare = (i: number): Start => starts.find((s) => s.spare === i)!;
    const founder = (r: number): Start => founders.find((s) => s.envRank === r)!;
    expect(run.stderr).toMatch(new RegExp(`rank 1 \\(pid ${founder(1).pid}\\) was killed by signal SIGKILL; an idle spare takes rank 1's place \\(restart 1 of 2\\)`));
    expect(run.stderr).toContain(`spare s0 (pid ${spare(0).pid}) took rank 1's place (life 1)`);
    expect(run.stderr).toMatch(/starting spare s1 \(pid \d+\) to replace spare s0/);
    expect(run.stderr).toMatch(new RegExp(`rank 1 \\(pid ${spare(0).pid}\\) was killed by signal SIGKILL; an idle spare takes rank 1's place \\(restart 2 of 2\\)`));
    expect(run.stderr).toContain(`spare s1 (pid ${spare(1).pid}) took rank 1's place (life 2)`);
    const s2 = Number(/starting spare s2 \(pid (\d+)\) to replace spare s1/.exec(run.stderr)?.[1]);
    expect(s2).toBeGreaterThan(0);
    // Spare output is named apart from the ranks'.
    expect(run.stderr).toMatch(/^\[s0\] took rank 1 \(life 1\)$/m);
    expect(run.stderr).toMatch(/^\[s1\] took rank 1 \(life 2\)$/m);

    // Survivors never restarted: the processes that ended are founders 0 and 2 and spare s1 as rank 1.
    const ends = read<End>(run.out, 'end');
    expect(ends.map((e) => [e.rank, e.pid]).sort()).toEqual([[0, founder(0).pid], [1, spare(1).pid], [2, founder(2).pid]]);
    expect(read<Kill>(run.out, 'kill').map((k) => k.pid).sort()).toEqual([founder(1).pid, spare(0).pid].sort());
    // Every committed step ran at 3: the spare was in the round that replaced the lost rank.
    const r0 = ends.find((e) => e.rank === 0)!;
    expect(r0.reports.map((x) => [x.step, x.size])).toEqual(Array.from({ length: N }, (_, s) => [s, 3]));
    expect(steps(run.out, spare(0).pid).map((x) => x.step)).toEqual(Array.from({ length: K2 - K }, (_, i) => K + i));
    expect(ends.find((e) => e.rank === 1)!.reports.map((x) => x.step)).toEqual(Array.from({ length: N - K2 }, (_, i) => K2 + i));

    const ref = await referenceChain(cfg, [{ size: 3, from: 0, to: N }]);
    for (const e of ends) {
      const got = new Float32Array(new Uint8Array(Buffer.from(e.params, 'base64')).buffer);
      expect(Array.from(got), `rank ${e.rank}`).toEqual(Array.from(ref.params.subarray(0, got.length)));
    }
    // Nothing of the job is left: ranks, the spares that held no rank (s2), their children.
    expect(stillThere([...starts.map((s) => s.pid), s2])).toBe('');
    const spared = toFullSize(run.out, founder(0).pid, 3);

    // The same first kill without spares: rank 1 is restarted and rejoins (3 / 2 / 3).
    const plain = await launch([], cfg, [{ rank: 1, life: 0, at: K }]);
    expect(plain.code, why(plain)).toBe(0);
    expect(plain.stderr).toMatch(/restarting rank 1 \(restart 1 of 2\)/);
    const plainR0 = read<End>(plain.out, 'end').find((e) => e.rank === 0)!;
    expect(plainR0.reports.find((x) => x.step === K)!.size).toBe(2);
    const unspared = toFullSize(plain.out, plainR0.pid, 3);
    console.log(`kill to the first committed step at full size: --spares 1 ${spared.map((ms) => `${ms} ms`).join(', ')}; no spares ${unspared[0]} ms`);
  }, 120_000);

  it('pairs the admitted spares with the lost RANKs that did not come back', () => {
    const m = (id: string, rank: number, prevRank: number, founding: number, life = 0): Member => ({ id, rank, prevRank, founding, life, step: 0, ticket: rank + 1 });
    const prev = [m('a', 0, 0, 0), m('b', 1, 1, 1, 2), m('c', 2, 2, 2), m('d', 3, 3, 3)];
    // RANK 1 and 3 lost; 2 lost and restarted (it came back as a joiner); two spares admitted.
    const now = [m('a', 0, 0, 0), m('s1', 1, -1, -2), m('c2', 2, -1, 2, 1), m('s0', 3, -1, -1)];
    expect(spareTakes(prev, now, 's1')).toEqual({ rank: 1, life: 3 });
    expect(spareTakes(prev, now, 's0')).toEqual({ rank: 3, life: 1 });
    expect(spareTakes(prev, now, 'a')).toBeUndefined();
    expect(spareTakes(prev, [m('a', 0, 0, 0), m('b', 1, 1, 1), m('c', 2, 2, 2), m('s', 3, -1, -1)], 's')).toEqual({ rank: 3, life: 1 });
  });

  it('refuses --spares without --restart-scope rank', () => {
    const cli = spawnSync(process.execPath, [BIN, 'run', '--nproc-per-node', '1', '--spares', '1', FIXTURE], { cwd: ROOT, encoding: 'utf8', env: { ...process.env, NCCL_NODE_TOKEN: undefined } });
    expect(cli.status).not.toBe(0);
    expect(cli.stderr).toMatch(/spares \(1\).*--restart-scope rank/);
    expect(() => resolveOptions({ script: FIXTURE, cwd: ROOT, nprocPerNode: 1, spares: 1 }))
      .toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', details: expect.objectContaining({ option: 'spares', restartScope: 'gang' }) }));
    expect(() => resolveOptions({ script: FIXTURE, cwd: ROOT, nprocPerNode: 1, restartScope: 'rank', spares: -1 }))
      .toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT' }));
    expect(resolveOptions({ script: FIXTURE, cwd: ROOT, nprocPerNode: 1, restartScope: 'rank', spares: 2 }).spares).toBe(2);
  });

  it('refuses --spares on a job of several nodes (a launcher adopts only its own spares)', () => {
    const base = { script: FIXTURE, cwd: ROOT, nprocPerNode: 1, restartScope: 'rank' as const, spares: 1, masterAddr: '127.0.0.1', masterPort: 29999 };
    expect(() => resolveOptions({ ...base, nnodes: 2, nodeRank: 0 }))
      .toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', details: expect.objectContaining({ option: 'spares', nodes: 2 }) }));
    expect(() => resolveOptions({ ...base, minNodes: 1, maxNodes: 3 }))
      .toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', details: expect.objectContaining({ option: 'spares', nodes: 3 }) }));
    expect(resolveOptions({ ...base, nnodes: 1, nodeRank: 0 }).spares).toBe(1);
  });
});
