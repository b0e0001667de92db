/**
 * Crash consistency: a saver SIGKILLed at random points never leaves a
 * checkpoint that loads but holds the wrong data, and an earlier checkpoint
 * always survives. Every trial continues in the same directory.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { latest, load, verify, listCheckpoints } from '../../src/checkpoint/index.js';
import { repoRoot } from '../helpers/ranks.js';
import { TENSORS, bigTensor, numelOf, shardOf } from './fixture.js';

const root = mkdtempSync(join(tmpdir(), 'ckpt-kill-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));
const TRIALS = Number(process.env.CKPT_KILL_TRIALS ?? 12);

function runAndKill(afterMs: number): Promise<number[]> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(repoRoot, 'test/checkpoint/kill-worker.ts')], {
      cwd: repoRoot, env: { ...process.env, CKPT_DIR: root }, stdio: ['ignore', 'pipe', 'inherit'],
    });
    const committed: number[] = [];
    let buf = '';
    let timer: NodeJS.Timeout | undefined;
    child.stdout.on('data', (d: Buffer) => {
      buf += d.toString();
      for (let i; (i = buf.indexOf('\n')) >= 0; buf = buf.slice(i + 1)) {
        const line = buf.slice(0, i);
        if (line.startsWith('@@')) committed.push((JSON.parse(line.slice(2)) as { committed: number }).committed);
      }
      // Kill relative to the first commit, so the point falls inside the save loop, not in startup.
      timer ??= setTimeout(() => child.kill('SIGKILL'), afterMs);
    });
    child.on('close', () => {
      clearTimeout(timer);
      resolve(committed);
    });
  });
}

describe('SIGKILL during saves', () => {
  it(`never leaves a loadable-but-wrong checkpoint (${TRIALS} trials)`, async () => {
    let lastCommitted = 0;
    for (let t = 0; t < TRIALS; t++) {
      const committed = await runAndKill(Math.floor(Math.random() * 400));
      if (committed.length) lastCommitted = committed.at(-1)!;
      const dir = await latest(root);
      expect(dir).not.toBeNull();
      const targets: Record<string, { data: Float32Array; offset: number }> = {};
      for (const name of TENSORS) targets[name] = { data: new Float32Array(numelOf(name)), offset: 0 };
      const big = new Float32Array(bigTensor.N);
      const r = await load(root, { ...targets, big: { data: big, offset: 0 } });
      // What the saver was told is durable is there: never older than the last reported commit.
      expect(r.step).toBeGreaterThanOrEqual(lastCommitted);
      for (const name of TENSORS) expect(Buffer.compare(Buffer.from(targets[name]!.data.buffer), Buffer.from(shardOf(name, 0, 1, r.step).buffer))).toBe(0);
      expect(Buffer.compare(Buffer.from(big.buffer), Buffer.from(bigTensor(r.step).buffer))).toBe(0);
      expect((await verify(dir!)).problems).toEqual([]);
      // The one before it (retention keeps 2) loads too.
      const done = (await listCheckpoints(root)).filter((e) => e.committed);
      if (done.length > 1) expect((await load(done.at(-2)!.dir, targets)).step).toBe(done.at(-2)!.step);
    }
  }, 240_000);
});
