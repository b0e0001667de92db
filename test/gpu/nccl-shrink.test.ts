// ncclCommShrink end to end on the stand-in libraries: a healthy 3-rank communicator
// shrunk to 2, one shrunk away from a hung peer with NCCL_SHRINK_ABORT, the argument
// checks, and the version gate. Expectations are computed: sums and gathers of the
// ranks' own values, the survivors' new ranks in parent order; the C-level checks
// against the NCCL result codes (nccl.h: ncclInvalidArgument 4, ncclInvalidUsage 5).
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { root, runRanks, standins } from './helpers.js';

describe('ncclCommShrink on the stand-ins', () => {
  it('3 ranks, rank 1 excluded: ranks 0 and 2 become 0 and 1 of a 2-rank communicator that all-reduces right', async () => {
    const rs = await runRanks(3, 'exclude', {}, 40_000, 'test/gpu/shrink-worker.mts');
    for (const r of rs) {
      expect(r.result?.fatal, r.stderr).toBeUndefined();
      expect(r.code).toBe(0);
      expect(r.result!.supportsShrink).toBe(true);
      expect(r.result!.before).toBe(6);
    }
    // Survivors in parent order; 1 + 3 = 4; the gather lists their parent ranks.
    expect(rs[0]!.result!.after).toEqual({ rank: 0, size: 2, sum: 4, ranks: [0, 2] });
    expect(rs[2]!.result!.after).toEqual({ rank: 1, size: 2, sum: 4, ranks: [0, 2] });
  }, 60_000);

  it('NCCL_SHRINK_ABORT away from a hung peer returns at once, failing the stuck all-reduce', async () => {
    const rs = await runRanks(3, 'hung', { NCCL_STANDIN_FAULT: 'hang:AllReduce:2:2' }, 40_000, 'test/gpu/shrink-worker.mts');
    for (const r of rs) {
      expect(r.result?.fatal, r.stderr).toBeUndefined();
      expect(r.code).toBe(0);
      expect(r.result!.before).toBe(6);
    }
    for (const r of rs.slice(0, 2)) {
      // Rank 2 stays hung for 8 s and the stuck op's deadline is 60 s: the shrink waited on neither.
      expect(r.result!.shrinkMs as number).toBeLessThan(5000);
      expect(r.result!.stuck).toBe('ERR_COMM_ABORTED');
      expect(r.result!.parentState).toBe('broken');
      expect(r.result!.after).toEqual({ rank: r.rank, size: 2, sum: 3 });
      console.log(`rank ${r.rank}: ncclCommShrink(NCCL_SHRINK_ABORT) with a hung peer took ${(r.result!.shrinkMs as number).toFixed(1)} ms`);
    }
  }, 60_000);

  it('bad exclude lists are refused before anything is queued, naming what was expected and what came', async () => {
    const rs = await runRanks(2, 'invalid', {}, 30_000, 'test/gpu/shrink-worker.mts');
    for (const r of rs) {
      expect(r.result?.fatal, r.stderr).toBeUndefined();
      expect(r.code).toBe(0);
      const e = r.result!.errors as Record<string, { code: string; message: string }>;
      expect(e.self).toMatchObject({ code: 'ERR_INVALID_ARGUMENT' });
      expect(e.self!.message).toContain(`shrink on rank ${r.rank} of 2: excludeRanks holds this rank (${r.rank})`);
      expect(e.range!.message).toContain('excludeRanks[0] must be a rank 0..1, received 5');
      expect(e.twice!.message).toContain(`excludeRanks holds rank ${1 - r.rank} twice`);
      expect(e.notArray).toMatchObject({ code: 'ERR_INVALID_ARGUMENT' });
      expect(e.notArray!.message).toContain('excludeRanks must be an array');
      expect(e.abort!.message).toContain('abort must be a boolean');
      expect(r.result!.after).toBe(3);
    }
  }, 60_000);

  it('NCCL 2.26 has no ncclCommShrink: supportsShrink is false and shrink says what it needs', async () => {
    const rs = await runRanks(2, 'old', { NCCL_STANDIN_VERSION: '22605' }, 30_000, 'test/gpu/shrink-worker.mts');
    for (const r of rs) {
      expect(r.result?.fatal, r.stderr).toBeUndefined();
      expect(r.result!.supportsShrink).toBe(false);
      expect(r.result!.error).toMatchObject({ code: 'ERR_UNAVAILABLE' });
      expect((r.result!.error as { message: string }).message).toContain('needs NCCL >= 2.27');
    }
  }, 60_000);
});

describe('ncclCommShrink in the stand-in libnccl, through its C ABI', () => {
  const exe = join(mkdtempSync(join(tmpdir(), 'nccl-node-shrink-')), 'shrink_check');
  const lib = join(standins, 'libnccl.so.2');
  const lines = (env: Record<string, string> = {}) => {
    const run = spawnSync(exe, [lib], { encoding: 'utf8', timeout: 30_000, env: { ...process.env, ...env } });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    return Object.fromEntries(run.stdout.trim().split('\n').map((l) => [l.split(' ')[0]!, l.slice(l.indexOf(' ') + 1)]));
  };

  beforeAll(() => {
    const c = spawnSync('g++', ['-std=c++17', '-O0', join(root, 'test/gpu/shrink_check.cpp'), '-ldl', '-lpthread', '-o', exe], { encoding: 'utf8', timeout: 120_000 });
    expect(c.status, c.stderr).toBe(0);
  }, 150_000);

  it('refuses bad exclude lists with ncclInvalidArgument (4), naming what is wrong, and writes no communicator', () => {
    const r = lines();
    expect(r.outside).toBe('4 ncclCommShrink: excludeRanksList holds rank 5, outside 0..1');
    expect(r.twice).toBe('4 ncclCommShrink: excludeRanksList holds rank 1 twice');
    expect(r.self).toBe('4 ncclCommShrink: excludeRanksList holds the calling rank 0');
    expect(r.count).toBe('4 ncclCommShrink: excludeRanksList must hold excludeRanksCount (1) ranks');
    expect(r.flags).toBe('4 ncclCommShrink: shrinkFlags must be NCCL_SHRINK_DEFAULT (0) or NCCL_SHRINK_ABORT (1), got 2');
    expect(r.newcomm).toBe('4 ncclCommShrink: newcomm is NULL');
    expect(r.out).toBe('untouched');
  });

  it('emulating NCCL 2.26, ncclCommShrink answers ncclInvalidUsage (5): it needs 2.27', () => {
    const r = lines({ NCCL_STANDIN_VERSION: '22605' });
    expect(r.outside).toMatch(/^5 ncclCommShrink needs NCCL >= 2\.27/);
  });
});
