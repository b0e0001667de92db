/**
 * Spawns one node process per rank with the environment init() reads (no
 * launcher needed), hands each a JSON payload, and collects what each wrote.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { freePort } from '../helpers/ranks.js';
export { freePort };

export interface RankOutput<R> {
  result: R;
  /** Float32 arrays the rank saved with writeArrays (rank 0 only, by convention). */
  arrays: Float32Array | null;
}

/**
 * Runs `script` on `world` ranks. The script reads its payload with
 * readPayload() and reports with writeResult(); a non-zero exit fails the run
 * with the rank's stderr.
 */
export async function runRanks<R>(script: string, world: number, payload: unknown, opts: { timeoutMs?: number; localWorldSize?: number } = {}): Promise<RankOutput<R>[]> {
  const dir = mkdtempSync(join(tmpdir(), 'nccl-node-runtime-'));
  const port = await freePort();
  const children: ChildProcess[] = [];
  const stderr: string[] = [];
  const localSize = opts.localWorldSize ?? world;
  try {
    const exits = Array.from({ length: world }, (_, rank) => {
      const child = spawn(process.execPath, ['--import', 'tsx', script], {
        env: {
          ...process.env,
          MASTER_ADDR: '127.0.0.1',
          MASTER_PORT: String(port),
          WORLD_SIZE: String(world),
          RANK: String(rank),
          LOCAL_RANK: String(rank % localSize),
          LOCAL_WORLD_SIZE: String(localSize),
          NCCL_NODE_TOKEN: 'runtime-test',
          RUNTIME_TEST_PAYLOAD: JSON.stringify(payload),
          RUNTIME_TEST_OUT: join(dir, `rank${rank}`),
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      children.push(child);
      stderr[rank] = '';
      child.stderr!.on('data', (d: Buffer) => (stderr[rank] += d.toString()));
      child.stdout!.on('data', (d: Buffer) => process.env.RUNTIME_TEST_VERBOSE && process.stdout.write(d));
      return new Promise<void>((resolve, reject) => {
        child.on('exit', (code, signal) =>
          code === 0 ? resolve() : reject(new Error(`rank ${rank} exited with ${code ?? signal}:\n${stderr[rank]!.slice(-4000)}`)),
        );
      });
    });
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`ranks did not finish within ${opts.timeoutMs ?? 120_000} ms`)), opts.timeoutMs ?? 120_000);
    });
    try {
      await Promise.race([Promise.all(exits), timeout]);
    } finally {
      clearTimeout(timer);
    }
    return Array.from({ length: world }, (_, rank) => {
      const base = join(dir, `rank${rank}`);
      const bin = `${base}.bin`;
      return {
        result: JSON.parse(readFileSync(`${base}.json`, 'utf8')) as R,
        arrays: existsSync(bin) ? new Float32Array(new Uint8Array(readFileSync(bin)).buffer) : null,
      };
    });
  } finally {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Largest |a-b| relative to the largest |b|, over concatenated arrays. */
export function maxRelDiff(a: Float32Array, b: Float32Array): number {
  if (a.length !== b.length) throw new Error(`length ${a.length} vs ${b.length}`);
  let diff = 0, scale = 0;
  for (let i = 0; i < a.length; i++) {
    diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
    scale = Math.max(scale, Math.abs(b[i]!));
  }
  return diff / scale;
}

export function concat(arrays: Float32Array[]): Float32Array {
  const out = new Float32Array(arrays.reduce((a, x) => a + x.length, 0));
  let off = 0;
  for (const a of arrays) {
    out.set(a, off);
    off += a.length;
  }
  return out;
}
