/**
 * Local checkpoints under the launcher: `nccl-node run --nproc-per-node 2
 * --max-restarts 1` trains TinyLM through train() (test/launch/fixtures/chaos-train.mts)
 * with in-memory snapshots every step and durable checkpoints every 4 steps; rank 1
 * SIGKILLs itself in step 7 (after its gradient all-reduce). The gang restart starts two new processes, which
 * find their snapshots of step 7 in the node-local directory (NCCL_NODE_INMEMORY_DIR):
 * the restore reports own memory for both ranks and step 7, where the durable
 * checkpoint holds step 4, so a disk restore would be told apart. The final parameters
 * are compared with an uninterrupted run of the same config (the reference, no
 * in-memory snapshots), and the job's snapshot files are gone once it succeeded.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.join(ROOT, 'bin/nccl-node.js');
const FIXTURE = 'test/launch/fixtures/chaos-train.mts';
const work = mkdtempSync(path.join(os.tmpdir(), 'ckpt-local-'));
const shm = mkdtempSync(path.join(existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir(), 'nccl-node-local-test-'));
afterAll(() => {
  rmSync(work, { recursive: true, force: true });
  rmSync(shm, { recursive: true, force: true });
});

interface Run { code: number | null; out: string }

function launch(name: string, flags: string[], env: Record<string, string>): Promise<Run> {
  const dir = path.join(work, name);
  mkdirSync(path.join(dir, 'reports'), { recursive: true });
  const child = spawn(process.execPath, [BIN, 'run', '--master-port', '0', '--nproc-per-node', '2', ...flags, FIXTURE], {
    cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env, CHAOS_STEPS: '10', CHAOS_CKPT_DIR: path.join(dir, 'ckpt'), CHAOS_CKPT_EVERY: '4',
      CHAOS_REPORTS: path.join(dir, 'reports'), CHAOS_TIMEOUT_MS: '15000', ...env,
    },
  });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), 50_000);
  return new Promise((resolve) => child.on('close', (code) => {
    clearTimeout(timer);
    resolve({ code, out });
  }));
}

const hashOf = (r: Run): string | undefined => /final params sha256 ([0-9a-f]{64})/.exec(r.out)?.[1];

describe('local (node-memory) checkpoints under nccl-node run', () => {
  it('a gang restart restores every rank from its own snapshot file, bit-identical to an uninterrupted run; the files go when the job succeeds', async () => {
    const reference = await launch('reference', [], {});
    expect(reference.code, reference.out).toBe(0);
    const run = await launch('faulted', ['--max-restarts', '1'], { CHAOS_MEM_EVERY: '1', CHAOS_KILL: '1@7', NCCL_NODE_INMEMORY_DIR: shm });
    expect(run.code, run.out).toBe(0);
    expect(run.out).toMatch(/restarting|restart/i);
    // Both ranks restored step 7 from their own node-local snapshot (the durable checkpoint is step 4).
    expect(run.out, run.out).toMatch(/restored step 7 \(memory; ranks: memory memory\)/);
    expect(run.out).not.toMatch(/restored step \d+ \(disk/);
    expect(hashOf(run)).toBeDefined();
    expect(hashOf(run)).toBe(hashOf(reference));
    expect(readdirSync(shm)).toEqual([]);
    console.log(`${/restored step 7 \(memory[^\n]*/.exec(run.out)![0]}; final params sha256 ${hashOf(run)} (reference ${hashOf(reference)})`);
  }, 60_000);
});
