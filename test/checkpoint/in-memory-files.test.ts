/**
 * Node-local snapshot files of in-memory checkpoints, two ranks on one node: a new
 * InMemoryCheckpoint in the same processes (what a restarted process has) restores
 * bit-exactly from the files (SHA-256 of the state each snapshot saw); a flipped byte
 * in a file fails its digest and the restore takes the peer's replica, or with that
 * damaged too the durable checkpoint, naming the file; another job's files are never
 * read and are removed once stale; a snapshot that one rank cannot write fails on
 * every rank, which keep the previous step; the job's cleanup removes its files.
 * Also: a restart that changed the world size refuses the snapshots (planRestore).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { jobKey, launcherJobId, resolveFiles } from '../../src/checkpoint/in-memory-files.js';
import { isNcclNodeError } from '../../src/errors.js';
import { planRestore } from '../../src/checkpoint/in-memory-plan.js';
import { runRanks } from '../helpers/ranks.js';

const root = mkdtempSync(join(os.tmpdir(), 'ckpt-inmem-files-'));
const dir = mkdtempSync(join('/dev/shm', 'nccl-node-files-test-'));
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
  rmSync(dir, { recursive: true, force: true });
});

type Report = Record<string, any>;

describe('in-memory checkpoints in node-local files', () => {
  it('a restarted instance restores from its files bit for bit; torn files fall back to the replica, then to disk; stale jobs are ignored and swept', async () => {
    const notADir = join(root, 'not-a-dir');
    writeFileSync(notADir, '');
    const out = await runRanks('test/checkpoint/in-memory-files-worker.ts', 2, {
      check: true, timeoutMs: 50_000, env: { NCCL_NODE_TIMEOUT_MS: '20000' },
      payload: { dir, ckpt: join(root, 'ckpt'), notADir },
    });
    const at = (phase: string, rank: number): Report => out[rank]!.reports.find((r) => r.phase === phase)!;
    const key = jobKey('A');
    const step4 = (job: string) => [`rank0.of1.step4`, `rank0.own.step4`, `rank1.of0.step4`, `rank1.own.step4`].map((n) => `nccl-node-snapshot.${jobKey(job)}.${n}`);
    for (const rank of [0, 1]) {
      const snap = at('snapshot', rank);
      const hashes = snap.hashes as Record<string, string>; // this rank's pieces of the state, as each snapshot saw them
      expect(snap.directory).toBe(dir);
      // Only the newest step's files are left; what a rank holds is what its files hold.
      expect(Object.keys(snap.sizes)).toEqual(step4('A'));
      const mine = Object.entries(snap.sizes as Record<string, number>).filter(([n]) => n.startsWith(`nccl-node-snapshot.${key}.rank${rank}.`));
      expect(snap.held).toMatchObject({ step: 4, own: snap.sizes[`nccl-node-snapshot.${key}.rank${rank}.own.step4`], total: mine.reduce((a, [, b]) => a + b, 0) });
      expect(hashes[2]).not.toBe(hashes[4]);

      expect(at('files', rank)).toMatchObject({ step: 4, source: 'memory', sources: ['memory', 'memory'], rejected: [], hash: hashes[4], files: step4('A') });

      const torn = at('torn-own', rank);
      expect(torn).toMatchObject({ step: 4, source: rank === 1 ? 'peer' : 'memory', sources: ['memory', 'peer'], hash: hashes[4], files: step4('A') });
      expect(torn.rejected).toHaveLength(1);
      expect(torn.rejected[0]).toMatchObject({ holder: 1, owner: 1, step: 4 });
      expect(torn.rejected[0].error).toMatch(new RegExp(`${key}\\.rank1\\.own\\.step4: CRC32C [0-9a-f]+ does not match`));

      const both = at('torn-both', rank);
      expect(both).toMatchObject({ step: 2, source: 'disk', sources: ['disk', 'disk'], hash: hashes[2], files: [] });
      expect(both.rejected.map((r: Report) => [r.holder, r.owner, r.step])).toEqual([[0, 1, 4], [1, 1, 4]]);
      for (const r of both.rejected) expect(r.error).toMatch(/CRC32C/);

      // Job A's step-4 files are newer than the durable step 2, and sound: job B never reads them.
      expect(at('other-job', rank)).toMatchObject({ step: 2, source: 'disk', rejected: [], filesA: step4('A') });
      expect(at('stale', rank)).toMatchObject({ step: 2, source: 'disk', filesA: [] });

      const nw = at('no-write', rank);
      expect(nw.failed).toMatch(/^ERR_IO: in-memory snapshot of step 5: rank 1 could not write its node-local files: .*not-a-dir/);
      expect(nw.held.step).toBe(4);
      expect(nw.files, `rank ${rank}`).toEqual(step4('C'));
      expect(at('after', rank).left).toEqual([]);
    }
    expect(at('cleanup', 0).removed).toBe(4);
  }, 60_000);

  it('a restart with another world size refuses the snapshots, naming why, and takes the durable checkpoint', () => {
    const e = (owner: number, step: number) => ({ owner, world: 4, step, bytes: 10, ok: true });
    const plan = planRestore([
      { rank: 0, place: { node: 0, localRank: 0 }, own: e(0, 6), replicas: [e(3, 6)], durable: { dir: 'd', step: 4 } },
      { rank: 1, place: { node: 0, localRank: 1 }, own: e(1, 6), replicas: [e(0, 6)] },
    ]);
    expect(plan).toMatchObject({ kind: 'disk', step: 4 });
    expect(plan.rejected.map((r) => r.error)).toEqual(Array(4).fill('taken in a world of 4 ranks, this one has 2'));
  });

  it('takes the directory and job from options or the environment; no job id means process memory', () => {
    expect(resolveFiles({}, { NCCL_NODE_JOB_ID: 'j', NCCL_NODE_INMEMORY_DIR: '/x' })).toEqual({ dir: '/x', job: 'j' });
    expect(resolveFiles({}, { NCCL_NODE_JOB_ID: 'j' })).toEqual({ dir: '/dev/shm', job: 'j' });
    expect(resolveFiles({}, { NCCL_NODE_JOB_ID: 'j', NCCL_NODE_INMEMORY_DIR: 'off' })).toBeNull();
    expect(resolveFiles({ dir: false }, { NCCL_NODE_JOB_ID: 'j' })).toBeNull();
    expect(resolveFiles({}, { TORCHELASTIC_RUN_ID: 'r1' })).toEqual({ dir: '/dev/shm', job: 'r1' });
    expect(resolveFiles({}, { TORCHELASTIC_RUN_ID: 'none' })).toBeNull();
    expect(resolveFiles({}, {})).toBeNull();
    expect(resolveFiles({ dir: '/y', job: 'k' }, { NCCL_NODE_JOB_ID: 'j' })).toEqual({ dir: '/y', job: 'k' });
    let err: unknown;
    try {
      resolveFiles({ dir: '/y' }, {});
    } catch (e) {
      err = e;
    }
    expect(isNcclNodeError(err, 'ERR_INVALID_ARGUMENT') && err.message).toMatch(/dir \/y needs a job id/);
    // The launcher's id: the same for one token and run id (every attempt), different otherwise.
    expect(launcherJobId('t', 'r')).toBe(launcherJobId('t', 'r'));
    expect(new Set([launcherJobId('t', 'r'), launcherJobId('t', 's'), launcherJobId('u', 'r')]).size).toBe(3);
  });
});
