/**
 * Multi-rank saves of DeviceBuffer shards on the stand-in GPU libraries (never
 * skipped: test/gpu/helpers.ts throws without the build): over NCCL (the
 * checkpoint's control traffic staged through device memory) with GPUDirect
 * Storage, and a rank SIGKILLed inside its shard write, over NCCL and Gloo:
 * the survivors must fail with ERR_PEER_LOST long before the communicator's
 * timeout, and nothing of that step may be committed.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { latest, listCheckpoints, load, verify } from '../../src/checkpoint/index.js';
import { describeRanks, runRanks, type RankResult } from '../helpers/ranks.js';
import { standinEnv, standins } from '../gpu/helpers.js';
import { value } from './fixture.js';

const NUMEL = 100_003; // ranks-worker.ts
const COMM_TIMEOUT_MS = 60_000;
const scratch = mkdtempSync(join(tmpdir(), 'ckpt-ranks-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

async function run(n: number, backend: 'nccl' | 'gloo', extra: Record<string, string> = {}, rankEnv?: (rank: number) => Record<string, string>): Promise<{ dir: string; res: RankResult[] }> {
  const dir = mkdtempSync(join(scratch, `${backend}-`));
  const res = await runRanks('test/checkpoint/ranks-worker.ts', n, {
    env: {
      ...standinEnv(), NCCL_NODE_LIBCUFILE: join(standins, 'libcufile.so.0'), CKPT_DIR: dir, BACKEND: backend,
      COMM_TIMEOUT_MS: String(COMM_TIMEOUT_MS), ...extra,
    },
    rankEnv,
    timeoutMs: 90_000,
  });
  return { dir, res };
}

describe('multi-rank DeviceBuffer checkpoints on the stand-ins', () => {
  it('2 ranks over NCCL: GDS shards, every rank loads the whole tensor into a DeviceBuffer', async () => {
    const { dir, res } = await run(2, 'nccl');
    for (const r of res) {
      expect(r.code, describeRanks(res)).toBe(0);
      expect(r.reports[0]).toMatchObject({ backend: 'nccl', deviceStaging: 'device', gds: true, gdsFallback: [], loadGds: true, bad: 0 });
    }
    // Read back here, on the host, at world size 1.
    const ckpt = (await latest(dir))!;
    const p = new Float32Array(NUMEL);
    await load(ckpt, { p: { data: p, offset: 0 } });
    let bad = 0;
    for (let i = 0; i < NUMEL; i++) if (!Object.is(p[i], value('p', i, 1))) bad++;
    expect(bad).toBe(0);
    expect((await verify(ckpt)).problems).toEqual([]);
  });

  for (const [backend, dies] of [['nccl', 1], ['gloo', 0]] as const) {
    it(`3 ranks over ${backend}, rank ${dies} killed mid-write: the others fail fast with ERR_PEER_LOST`, async () => {
      const { dir, res } = await run(3, backend, { DIE_RANK: String(dies) });
      expect(res[dies]!.signal).toBe('SIGKILL');
      for (const r of res.filter((x) => x.rank !== dies)) {
        expect(r.code, describeRanks(res)).toBe(0);
        const step2 = r.reports[0]!.step2 as Record<string, any>;
        expect(step2.committed).toBe(false);
        expect(step2.code).toBe('ERR_PEER_LOST');
        expect(step2.message).toMatch(/^checkpoint step 2 not committed: a rank died or left during the save \(in the (barrier|exchange)\)/);
        expect(step2.details).toMatchObject({ step: 2 });
        // Far sooner than the communicator's timeout would have ended it.
        expect(step2.ms).toBeLessThan(COMM_TIMEOUT_MS / 6);
      }
      // Step 1 stands; step 2 left debris at most, never a manifest.
      const entries = await listCheckpoints(dir);
      expect(entries.map((e) => [e.step, e.committed])).toEqual([[1, true], [2, false]]);
      expect(await latest(dir)).toBe(entries[0]!.dir);
    });
  }

  for (const backend of ['gloo', 'nccl'] as const) {
    it(`3 ranks over ${backend}, rank 0 killed right after its commit: the others report step 2 committed, as the disk says`, async () => {
      const { dir, res } = await run(3, backend, { SAVE_STEP2: '1' }, (rank): Record<string, string> => (rank === 0 ? { NCCL_NODE_CKPT_FAULT: 'exit-after-commit@2' } : {}));
      expect(res[0]!.signal, describeRanks(res)).toBe('SIGKILL');
      const ckpt = await latest(dir);
      expect(ckpt).toBe(join(dir, 'step-0000000002'));
      for (const r of res.slice(1)) {
        expect(r.code, describeRanks(res)).toBe(0);
        expect(r.reports[0]!.step2, describeRanks(res)).toEqual({ committed: true });
      }
      const p = new Float32Array(NUMEL);
      const got = await load(ckpt!, { p: { data: p, offset: 0 } });
      expect(got.step).toBe(2);
      let bad = 0;
      for (let i = 0; i < NUMEL; i++) if (!Object.is(p[i], value('p', i, 2))) bad++;
      expect(bad).toBe(0);
      expect((await verify(ckpt!)).problems).toEqual([]);
    });
  }
});
