/**
 * Checkpoints due faster than they commit (a save after every step of a tiny model):
 * train() waits for the previous save instead of failing with the checkpointer's
 * "saves already pending", every save commits and verifies, and the parameters equal
 * those of the same run without checkpoints.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { listCheckpoints, verify } from '../../src/checkpoint/index.js';
import { repoRoot } from '../helpers/ranks.js';

const exec = promisify(execFile);
const root = mkdtempSync(join(tmpdir(), 'save-backpressure-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

async function train(...args: string[]): Promise<string> {
  const { stdout } = await exec(process.execPath, ['bin/nccl-node.js', 'run', '--nproc-per-node', '2', 'examples/train.ts', '--model', 'tiny',
    '--global-batch', '4', '--lr', '1e-2', '--steps', '16', ...args], { cwd: repoRoot, timeout: 60_000 });
  const hash = /final params sha256 ([0-9a-f]{64})/.exec(stdout)?.[1];
  if (!hash) throw new Error(`no final hash in:\n${stdout}`);
  return hash;
}

describe('train() checkpoints every step', () => {
  it('commits every save and trains as without checkpoints', async () => {
    const plain = await train();
    const ckpt = join(root, 'ckpt');
    expect(await train('--ckpt-dir', ckpt, '--ckpt-every', '1', '--keep', '100')).toBe(plain);
    const all = await listCheckpoints(ckpt);
    expect(all.map((e) => [e.step, e.committed])).toEqual(Array.from({ length: 16 }, (_, i) => [i + 1, true]));
    for (const e of all) expect((await verify(e.dir)).problems).toEqual([]);
  }, 120_000);
});
