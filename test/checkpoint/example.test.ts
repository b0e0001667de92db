/**
 * Issue 6's "done when": the ckpt CLI works on checkpoints written by the example
 * training script, and a run resumed from one continues bit-exactly like an
 * uninterrupted run (2 ranks under the launcher, the tiny model, a few steps).
 */
import { execFile } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { repoRoot } from '../helpers/ranks.js';

const exec = promisify(execFile);
const root = mkdtempSync(join(tmpdir(), 'ckpt-example-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const BASE = ['--model', 'tiny', '--global-batch', '4', '--lr', '1e-2'];

async function cli(...args: string[]): Promise<{ stdout: string; stderr: string }> {
  return exec(process.execPath, ['bin/nccl-node.js', ...args], { cwd: repoRoot, timeout: 60_000 });
}

/** Runs examples/train.ts on 2 ranks; returns rank 0's per-step lines (timings cut) and the params hash. */
async function train(...args: string[]): Promise<{ out: string; steps: Map<number, string>; hash: string }> {
  const { stdout: out } = await cli('run', '--prefix', '--nproc-per-node', '2', 'examples/train.ts', ...BASE, ...args);
  const steps = new Map<number, string>();
  for (const m of out.matchAll(/^\[0\] step (\d+) (loss .*) \d+ ms$/gm)) steps.set(Number(m[1]), m[2]!);
  const hash = /final params sha256 ([0-9a-f]{64})/.exec(out)?.[1];
  if (!hash) throw new Error(`no final hash in:\n${out}`);
  return { out, steps, hash };
}

describe('examples/train.ts checkpoints', () => {
  it('saves, the CLI reads what it saved, and resume is bit-exact (FSDP stage 3 and into DDP)', async () => {
    const ckpt = join(root, 'ckpt');
    const straight = await train('--parallel', 'fsdp', '--stage', '3', '--steps', '5');
    expect(straight.steps.size).toBe(5);

    // "Interrupted" after 3 steps: saves after steps 2 (interval) and 3 (the end).
    const first = await train('--parallel', 'fsdp', '--stage', '3', '--steps', '3', '--ckpt-dir', ckpt, '--ckpt-every', '2');
    for (const s of [0, 1, 2]) expect(first.steps.get(s)).toBe(straight.steps.get(s));

    const ls = (await cli('ckpt', 'ls', ckpt)).stdout;
    expect(ls).toMatch(/step-0000000002 {2}step 2 {2}world 2 {2}42 tensors/);
    expect(ls).toMatch(/step-0000000003 {2}step 3 {2}world 2 {2}42 tensors/);
    expect(ls).not.toMatch(/UNCOMMITTED|BAD/);
    expect((await cli('ckpt', 'verify', ckpt)).stdout).toMatch(/step-0000000003: OK \(step 3, 42 tensors/);
    const inspect = (await cli('ckpt', 'inspect', ckpt)).stdout;
    expect(inspect).toMatch(/^embed\.tok {2}float32 {2}\[61, 16\] {2}2 /m);
    expect(inspect).toMatch(/^embed\.tok\.exp_avg_sq {2}float32 {2}\[61, 16\]/m);
    expect(inspect).toMatch(/"optimizerStep":3/);
    const manifest = JSON.parse((await cli('ckpt', 'inspect', ckpt, '--json')).stdout) as { step: number; worldSize: number; train: { step: number } };
    expect(manifest).toMatchObject({ step: 3, worldSize: 2, train: { step: 3, optimizerStep: 3 } });

    const out = join(root, 'model.safetensors');
    expect((await cli('ckpt', 'convert', ckpt, out)).stdout).toMatch(/42 tensors/);
    const file = readFileSync(out);
    const header = JSON.parse(file.subarray(8, 8 + Number(file.readBigUInt64LE(0))).toString()) as Record<string, { dtype: string; shape: number[] }>;
    expect(header['head.w']).toMatchObject({ dtype: 'F32', shape: [16, 61] });
    expect(Object.keys(header).filter((k) => k !== '__metadata__')).toHaveLength(42);

    // Keep a copy holding only step 2 for the cross-layout resume below.
    const older = join(root, 'older');
    cpSync(ckpt, older, { recursive: true });
    rmSync(join(older, 'step-0000000003'), { recursive: true });

    const resumed = await train('--parallel', 'fsdp', '--stage', '3', '--steps', '5', '--ckpt-dir', ckpt, '--ckpt-every', '2', '--resume');
    expect(resumed.out).toMatch(/resumed from .*step-0000000003 at step 3/);
    expect([...resumed.steps.keys()]).toEqual([3, 4]);
    for (const s of [3, 4]) expect(resumed.steps.get(s)).toBe(straight.steps.get(s));
    expect(resumed.hash).toBe(straight.hash);

    // Pieces are named per parameter, so FSDP's shards load into DDP's replicas.
    const ddp = await train('--parallel', 'ddp', '--steps', '5', '--ckpt-dir', older, '--ckpt-every', '100', '--resume');
    expect(ddp.out).toMatch(/resumed from .*step-0000000002 at step 2/);
    expect(ddp.hash).toBe(straight.hash);
  }, 180_000);
});
