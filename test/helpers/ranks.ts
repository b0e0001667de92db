/**
 * The one way tests run ranks: a script as N processes on this machine, with the
 * environment a launcher would give them (plus per-rank extras), each killed at
 * the timeout. A rank reports in any of three ways, all collected: JSON lines
 * prefixed "@@" (report()), one JSON result and an optional float32 blob written
 * with writeResult() (arrays too large for a line), and its plain stdout/stderr.
 * A payload given to runRanks reaches every rank through readPayload().
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

const PAYLOAD = 'NCCL_NODE_TEST_PAYLOAD';
const OUT = 'NCCL_NODE_TEST_OUT';

export interface RankResult<R = unknown> {
  rank: number;
  code: number | null;
  signal: NodeJS.Signals | null;
  /** Killed at timeoutMs. */
  timedOut: boolean;
  stdout: string;
  stderr: string;
  /** Parsed "@@{...}" lines, in order. */
  reports: Record<string, unknown>[];
  /** What the rank passed to writeResult(), if it did. */
  result: R | undefined;
  /** The float32 blob the rank passed to writeResult(), if any. */
  arrays: Float32Array | null;
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

/**
 * `n` consecutive free ports (for ranks that serve on port + LOCAL_RANK), below the
 * kernel's ephemeral range (32768 and up by default): a port there is free now and no
 * ephemeral bind (a rank's own connections, a store client) can take it before the
 * rank listens on it, as it can take the neighbour of a port freePort() returned.
 */
export async function freePortRun(n: number): Promise<number> {
  const canListen = (port: number): Promise<boolean> => new Promise((resolve) => {
    const s = createServer().once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
  for (let attempt = 0; attempt < 200; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * (12_000 - n));
    let all = true;
    for (let i = 0; i < n && all; i++) all = await canListen(base + i);
    if (all) return base;
  }
  throw new Error(`no ${n} consecutive free ports found in 20000-31999`);
}

export interface RunOptions {
  /** Extra environment; a variable set to undefined is left out (spawn skips it). */
  env?: Record<string, string | undefined>;
  /** Per-rank extra environment. */
  rankEnv?: (rank: number) => Record<string, string>;
  args?: string[];
  /** Per rank: SIGKILL after this long (default 90 s). */
  timeoutMs?: number;
  /** Ranks per "node": LOCAL_RANK is rank % localWorldSize (default: all on one node). */
  localWorldSize?: number;
  /** JSON handed to every rank (readPayload()). */
  payload?: unknown;
  /**
   * Throw, with the failing rank's exit and stderr tail, when a rank exits non-zero
   * or times out; the other ranks are killed at once instead of waiting on a dead peer.
   */
  check?: boolean;
}

export async function runRanks<R = unknown>(script: string, size: number, options: RunOptions = {}): Promise<RankResult<R>[]> {
  const port = await freePort();
  const timeoutMs = options.timeoutMs ?? 90_000;
  const local = options.localWorldSize ?? size;
  const path = script.startsWith('/') ? script : join(repoRoot, script);
  const dir = mkdtempSync(join(tmpdir(), 'nccl-node-ranks-'));
  const children: ChildProcess[] = [];
  let failed: ((err: Error) => void) | null = null;
  const failure = new Promise<never>((_, reject) => (failed = reject));
  failure.catch(() => undefined);
  const runs = Array.from({ length: size }, (_, rank) =>
    new Promise<RankResult<R>>((resolve) => {
      const out = join(dir, `rank${rank}`);
      const child = spawn(process.execPath, ['--import', 'tsx', path, ...(options.args ?? [])], {
        cwd: repoRoot,
        env: {
          ...process.env,
          RANK: String(rank),
          WORLD_SIZE: String(size),
          LOCAL_RANK: String(rank % local),
          LOCAL_WORLD_SIZE: String(local),
          MASTER_ADDR: '127.0.0.1',
          MASTER_PORT: String(port),
          NCCL_NODE_TOKEN: 'test-token',
          ...(options.payload === undefined ? {} : { [PAYLOAD]: JSON.stringify(options.payload) }),
          [OUT]: out,
          ...options.env,
          ...options.rankEnv?.(rank),
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.push(child);
      let stdout = '';
      let stderr = '';
      let timedOut = false;
      child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
      const timer = setTimeout(() => {
        timedOut = true;
        child.kill('SIGKILL');
      }, timeoutMs);
      child.on('close', (code, signal) => {
        clearTimeout(timer);
        const reports = stdout
          .split('\n')
          .filter((l) => l.startsWith('@@'))
          .map((l) => JSON.parse(l.slice(2)) as Record<string, unknown>);
        const result = existsSync(`${out}.json`) ? (JSON.parse(readFileSync(`${out}.json`, 'utf8')) as R) : undefined;
        const arrays = existsSync(`${out}.bin`) ? new Float32Array(new Uint8Array(readFileSync(`${out}.bin`)).buffer) : null;
        const r: RankResult<R> = { rank, code, signal, timedOut, stdout, stderr, reports, result, arrays };
        if (options.check && (code !== 0 || timedOut)) {
          const why = timedOut ? `did not finish within ${timeoutMs} ms` : `exited with ${code ?? signal}`;
          failed!(new Error(`rank ${rank} ${why}:\n${stderr.slice(-4000)}`));
        }
        resolve(r);
      });
    }),
  );
  try {
    return await (options.check ? Promise.race([Promise.all(runs), failure]) : Promise.all(runs));
  } finally {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Used by rank scripts: one structured line the test parses. */
export function report(value: Record<string, unknown>): void {
  process.stdout.write(`@@${JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v))}\n`);
}

/** Used by rank scripts: the payload runRanks was given. */
export function readPayload<T>(): T {
  return JSON.parse(process.env[PAYLOAD] ?? '{}') as T;
}

/** Used by rank scripts: a JSON result, and optionally float32 arrays (by convention rank 0's). */
export function writeResult(result: unknown, arrays?: Float32Array): void {
  const base = process.env[OUT]!;
  if (arrays) writeFileSync(`${base}.bin`, new Uint8Array(arrays.buffer, arrays.byteOffset, arrays.byteLength));
  writeFileSync(`${base}.json`, JSON.stringify(result));
}

/** A readable failure: which rank, its exit, and the tail of its stderr. */
export function describeRanks(results: RankResult[]): string {
  return results
    .map((r) => `rank ${r.rank}: code ${r.code} signal ${r.signal}${r.timedOut ? ' (timed out)' : ''}\n${r.stderr.split('\n').slice(-15).join('\n')}`)
    .join('\n');
}
