/** Training resumed from a checkpoint continues bit-exactly like the run never interrupted (2 ranks). */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { describeRanks, runRanks, type RankResult } from '../helpers/ranks.js';

const root = mkdtempSync(join(tmpdir(), 'ckpt-resume-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

async function run(env: Record<string, string>): Promise<RankResult[]> {
  const res = await runRanks('test/checkpoint/train-worker.ts', 2, { env: { CKPT_DIR: root, STEPS: '8', ...env }, timeoutMs: 60_000 });
  if (res.some((r) => r.code !== 0)) throw new Error(describeRanks(res));
  return res;
}

describe('resume', () => {
  it('stop at step 3, save, resume to 8 == 8 straight steps, bit for bit', async () => {
    const straight = await run({ MODE: 'full', CKPT_DIR: join(root, 'unused') });
    await run({ MODE: 'first', STOP: '3' });
    const resumed = await run({ MODE: 'resume' });
    for (let r = 0; r < 2; r++) {
      expect(resumed[r]!.reports[0]!.step).toBe(8);
      expect(resumed[r]!.reports[0]!.w).toBe(straight[r]!.reports[0]!.w);
    }
  }, 120_000);
});
