/**
 * Runs a training fixture under `nccl-node run --restart-scope rank` (one node, fast
 * heartbeats, short grace period) and collects what its ranks wrote: each rank writes
 * `<kind>-<pid>.json` records into FT_OUT and reads its configuration from FT_PAYLOAD.
 * Shared by the in-process recovery, hot-spare and elastic HSDP launcher tests.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach } from 'vitest';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.join(ROOT, 'bin/nccl-node.js');

export interface RankScopeRun { code: number | null; stderr: string; out: string }

export interface RankScopeOptions {
  script: string;
  nproc: number;
  payload: unknown;
  maxRestarts?: number;
  /** More launcher arguments (e.g. ['--spares', '1']). */
  args?: string[];
  /** The launcher is SIGKILLed after this long (ms). */
  deadlineMs?: number;
}

const started: ChildProcess[] = [];
afterEach(() => {
  for (const c of started.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

export async function launchRankScope(o: RankScopeOptions): Promise<RankScopeRun> {
  const out = mkdtempSync(path.join(os.tmpdir(), 'nccl-node-rank-scope-'));
  const child = spawn(process.execPath, [BIN, 'run', '--nproc-per-node', String(o.nproc), '--restart-scope', 'rank',
    '--max-restarts', String(o.maxRestarts ?? 2), '--heartbeat-interval', '0.25', '--grace-period', '1', '--join-timeout', '30',
    ...(o.args ?? []), o.script], {
    cwd: ROOT,
    env: { ...process.env, NCCL_NODE_TOKEN: undefined, FT_OUT: out, FT_PAYLOAD: JSON.stringify(o.payload) },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  started.push(child);
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const code = await new Promise<number | null>((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), o.deadlineMs ?? 45_000);
    child.on('close', (c) => {
      clearTimeout(timer);
      resolve(c);
    });
  });
  return { code, stderr, out };
}

/** Every `<kind>-*.json` record the ranks wrote into `dir`. */
export function readRecords<T>(dir: string, kind: string): T[] {
  return readdirSync(dir).filter((f) => f.startsWith(`${kind}-`)).map((f) => JSON.parse(readFileSync(path.join(dir, f), 'utf8')) as T);
}

/** The launcher's last lines other than JSON logs: what a failed assertion shows. */
export function tail(stderr: string, lines = 30): string {
  return stderr.split('\n').filter((l) => !l.startsWith('{')).slice(-lines).join('\n');
}
