/**
 * Runs one script as N rank processes on this machine, with the environment a
 * launcher would give them, and collects what each printed. Rank scripts report
 * structured results as JSON lines prefixed with "@@".
 */
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export interface RankResult {
  rank: number;
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** Parsed "@@{...}" lines, in order. */
  reports: Record<string, unknown>[];
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      const port = typeof addr === 'object' && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

export interface RunOptions {
  env?: Record<string, string>;
  /** Per-rank extra environment. */
  rankEnv?: (rank: number) => Record<string, string>;
  args?: string[];
  timeoutMs?: number;
}

export async function runRanks(script: string, size: number, options: RunOptions = {}): Promise<RankResult[]> {
  const port = await freePort();
  const timeoutMs = options.timeoutMs ?? 90_000;
  const path = script.startsWith('/') ? script : join(repoRoot, script);
  const runs = Array.from({ length: size }, (_, rank) =>
    new Promise<RankResult>((resolve) => {
      const child = spawn(process.execPath, ['--import', 'tsx', path, ...(options.args ?? [])], {
        cwd: repoRoot,
        env: {
          ...process.env,
          RANK: String(rank),
          WORLD_SIZE: String(size),
          LOCAL_RANK: String(rank),
          LOCAL_WORLD_SIZE: String(size),
          MASTER_ADDR: '127.0.0.1',
          MASTER_PORT: String(port),
          NCCL_NODE_TOKEN: 'test-token',
          ...options.env,
          ...options.rankEnv?.(rank),
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      child.on('close', (code, signal) => {
        clearTimeout(timer);
        const reports = stdout
          .split('\n')
          .filter((l) => l.startsWith('@@'))
          .map((l) => JSON.parse(l.slice(2)) as Record<string, unknown>);
        resolve({ rank, code, signal, stdout, stderr, reports });
      });
    }),
  );
  return Promise.all(runs);
}

/** Used by rank scripts: one structured line the test parses. */
export function report(value: Record<string, unknown>): void {
  process.stdout.write(`@@${JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))}\n`);
}

/** A readable failure: which rank, its exit, and the tail of its stderr. */
export function describeRanks(results: RankResult[]): string {
  return results
    .map((r) => `rank ${r.rank}: code ${r.code} signal ${r.signal}\n${r.stderr.split('\n').slice(-15).join('\n')}`)
    .join('\n');
}
