/** Shared configs of the multi-rank correctness tests. */
import { fileURLToPath } from 'node:url';
import { TEST_CONFIG } from '../../src/models/tiny-lm/tiny-lm.js';
import type { TrainConfig } from '../../src/train/loop.js';
import { runRanks } from '../helpers/ranks.js';

export const WORKER = fileURLToPath(new URL('./train-worker.ts', import.meta.url));

/** Small buckets so the ~1.3M-parameter test model spreads over several of them. */
export const DDP = { kind: 'ddp', firstBucketBytes: 64 * 1024, bucketBytes: 1024 * 1024 } as const;

export function baseConfig(over: Partial<TrainConfig> = {}): TrainConfig {
  return {
    model: TEST_CONFIG,
    steps: 3,
    globalBatch: 4,
    microBatches: 1,
    parallel: DDP,
    optimizer: { kind: 'adamw', lr: 1e-3, weightDecay: 0.01 },
    dataSeed: 3,
    ...over,
  };
}

export interface RunOut {
  losses: number[];
  gradNorms: (number | null)[];
  memory: { params: number; grads: number; optimizer: number; peakTransient: number };
  params: Float32Array;
  /** GPU path: the largest device-to-host copy during finish + clip + step (stand-in trace). */
  stepDtoHMax?: number;
}

/** Trains every config on `world` ranks in one set of processes; returns rank 0's view of each run. */
export async function runAll(world: number, runs: TrainConfig[], timeoutMs: number): Promise<RunOut[]> {
  const out = await runRanks<Omit<RunOut, 'params'>[]>(WORKER, world, { payload: { runs }, check: true, timeoutMs });
  const blob = out[0]!.arrays!;
  const per = blob.length / runs.length;
  return out[0]!.result!.map((r, i) => ({ ...r, params: blob.subarray(i * per, (i + 1) * per) }));
}
