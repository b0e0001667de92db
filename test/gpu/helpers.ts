// Shared helpers for the GPU tests: the stand-in libraries, the addon build in
// build/ (or NCCL_NODE_GPU_BUILD), and a launcher for N rank processes running test/gpu/worker.mts.
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

import { freePort, runRanks as run } from '../helpers/ranks.js';
export { freePort };

export interface RankResult {
  rank: number;
  code: number | null;
  result: Record<string, unknown> | undefined;
  stderr: string;
}

/**
 * Runs `scenario` on `n` ranks (runRanks of test/helpers/ranks.ts, on the stand-ins)
 * and collects each rank's RESULT line, with the flight-recorder directory they shared.
 */
export async function runRanks(n: number, scenario: string, env: Record<string, string> = {}, timeoutMs = 60000,
  script = 'test/gpu/worker.mts'): Promise<RankResult[]> {
  const frDir = mkdtempSync(join(tmpdir(), 'nccl-node-fr-'));
  const ranks = await run(join(root, script), n, {
    env: { ...standinEnv(), NCCL_NODE_TOKEN: 'gpu-test-token', NCCL_NODE_FLIGHT_RECORDER_DIR: frDir, SCENARIO: scenario, ...env },
    timeoutMs,
  });
  return ranks.map(({ rank, code, stdout, stderr }) => {
    const line = stdout.split('\n').find((l) => l.startsWith('RESULT '));
    return { rank, code, result: line ? { ...JSON.parse(line.slice(7)), frDir } : undefined, stderr };
  });
}
