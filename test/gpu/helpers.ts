// Shared helpers for the GPU tests: the stand-in libraries, the addon build in
// build/ (or NCCL_NODE_GPU_BUILD), and a launcher for N rank processes running test/gpu/worker.mts.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const root = join(import.meta.dirname, '..', '..');
// The build scripts/setup.sh makes (stand-ins in build/standins); another with NCCL_NODE_GPU_BUILD.
export const build = process.env.NCCL_NODE_GPU_BUILD ?? join(root, 'build');
export const addon = join(build, 'Release', 'nccl_node.node');
export const standins = join(build, 'standins');
// Never skipped: CI builds the stand-ins, and a GPU path whose tests do not run is not done.
if (!existsSync(addon) || !existsSync(join(standins, 'libnccl.so.2'))) {
  throw new Error(`the GPU tests need the addon and the stand-in libraries in ${build}: run bash scripts/setup.sh`);
}

/** Environment that loads the stand-ins instead of the real libraries. */
export function standinEnv(extra: Record<string, string> = {}): Record<string, string> {
  return {
    NCCL_NODE_ADDON: addon,
    NCCL_NODE_LIBCUDA: join(standins, 'libcuda.so.1'),
    NCCL_NODE_LIBNCCL: join(standins, 'libnccl.so.2'),
    NCCL_NODE_LIBNVML: join(standins, 'libnvidia-ml.so.1'),
    ...extra,
  };
}

import { freePort } from '../helpers/ranks.js';
export { freePort };

export interface RankResult {
  rank: number;
  code: number | null;
  result: Record<string, unknown> | undefined;
  stderr: string;
}

/** Runs `scenario` on `n` ranks (each its own process) and collects each rank's RESULT line. */
export async function runRanks(n: number, scenario: string, env: Record<string, string> = {}, timeoutMs = 60000,
  script = 'test/gpu/worker.mts'): Promise<RankResult[]> {
  const port = await freePort();
  const frDir = mkdtempSync(join(tmpdir(), 'nccl-node-fr-'));
  const procs = Array.from({ length: n }, (_, rank) => new Promise<RankResult>((resolve) => {
    const child = spawn(process.execPath, ['--import', 'tsx', join(root, script)], {
      env: {
        ...process.env,
        ...standinEnv(),
        RANK: String(rank), WORLD_SIZE: String(n), LOCAL_RANK: String(rank), LOCAL_WORLD_SIZE: String(n),
        MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port), NCCL_NODE_TOKEN: 'gpu-test-token',
        NCCL_NODE_FLIGHT_RECORDER_DIR: frDir, SCENARIO: scenario, ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '', err = '';
    child.stdout.on('data', (d: Buffer) => { out += d.toString(); });
    child.stderr.on('data', (d: Buffer) => { err += d.toString(); });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      const line = out.split('\n').find((l) => l.startsWith('RESULT '));
      resolve({ rank, code, result: line ? JSON.parse(line.slice(7)) : undefined, stderr: err });
    });
  }));
  const results = await Promise.all(procs);
  return results.map((r) => ({ ...r, result: r.result ? { ...r.result, frDir } : undefined }));
}
