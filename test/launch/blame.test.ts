/**
 * The launcher names the rank that failed first. A rank SIGKILLed while the others
 * are inside an all-reduce makes them fail with ERR_PEER_LOST and exit 1 a moment
 * later; the launcher often learns of several exits at once, and must still name
 * the killed rank and exit with its code (128 + 9), never a survivor's.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.join(ROOT, 'bin/nccl-node.js');
const JOB = 'test/launch/fixtures/job.mts';
const TRIALS = 30;

interface Trial {
  code: number | null;
  last: string;
  pids: Map<number, number>;
}

function trial(victim: number): Promise<Trial> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, 'run', '--master-port', '0', '--nproc-per-node', '3', '--grace-period', '2', JOB, 'kill', String(victim)], {
      cwd: ROOT,
      env: { ...process.env, NCCL_NODE_TOKEN: undefined },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      const pids = new Map<number, number>();
      for (const m of out.matchAll(/pid=(\d+) rank=(\d+)/g)) pids.set(Number(m[2]), Number(m[1]));
      const lines = err.trimEnd().split('\n');
      resolve({ code, last: lines[lines.length - 1] ?? '', pids });
    });
  });
}

/** A zombie (dead, not yet reaped by its stopped parent) counts as dead. */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

async function until(cond: () => boolean, ms: number, what: string): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * The race made certain: the launcher is stopped (as a busy one is late) while the
 * victim is SIGKILLed and the survivors die of the lost peer, so it learns of all
 * the exits at once when it resumes.
 */
async function stalledTrial(victim: number): Promise<{ code: number | null; last: string; victimPid: number }> {
  const child = spawn(process.execPath, [BIN, 'run', '--master-port', '0', '--no-prefix', '--nproc-per-node', '3', '--grace-period', '2', JOB, 'stall', String(victim)], {
    cwd: ROOT,
    env: { ...process.env, NCCL_NODE_TOKEN: undefined },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const closed = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
  try {
    await until(() => (out.match(/^ready rank=/gm) ?? []).length === 3, 40_000, 'three ready ranks');
    const pids = new Map<number, number>();
    for (const m of out.matchAll(/pid=(\d+) rank=(\d+)/g)) pids.set(Number(m[2]), Number(m[1]));
    const victimPid = pids.get(victim)!;
    child.kill('SIGSTOP');
    process.kill(victimPid, 'SIGKILL');
    await until(() => [...pids.values()].every((p) => !alive(p)), 20_000, 'every rank to die');
    child.kill('SIGCONT');
    const code = await closed;
    const lines = err.trimEnd().split('\n');
    return { code, last: lines[lines.length - 1] ?? '', victimPid };
  } finally {
    clearTimeout(timer);
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGCONT');
      child.kill('SIGKILL');
    }
  }
}

describe('nccl-node run blames the first failure', () => {
  it('names the killed rank when the launcher learns of every exit at once', async () => {
    for (const victim of [2, 1, 2]) {
      const t = await stalledTrial(victim);
      expect({ victim, code: t.code, last: t.last }).toEqual({
        victim,
        code: 137,
        last: expect.stringMatching(new RegExp(`^nccl-node run: rank ${victim} \\(pid ${t.victimPid}\\) was killed by signal SIGKILL; `)),
      });
    }
  }, 180_000);

  it(`names the SIGKILLed rank, not a survivor that lost its peer (${TRIALS} trials)`, async () => {
    const wrong: string[] = [];
    // Two jobs at a time: the machine may have two cores, and a busy launcher is what
    // makes exits arrive together.
    for (let i = 0; i < TRIALS; i += 2) {
      const batch = await Promise.all([0, 1].filter((j) => i + j < TRIALS).map((j) => trial((i + j) % 3)));
      for (const [j, t] of batch.entries()) {
        const victim = (i + j) % 3;
        const want = `nccl-node run: rank ${victim} (pid ${t.pids.get(victim)}) was killed by signal SIGKILL; `;
        if (t.code !== 137 || !t.last.startsWith(want)) wrong.push(`trial ${i + j}: exit ${t.code}, "${t.last}"`);
      }
    }
    expect(wrong).toEqual([]);
  }, 600_000);
});
