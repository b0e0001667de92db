/**
 * predict(): the step time of the example models (TinyLM, GPT) trained data-parallel
 * (DDP) on `ranks` local ranks of a calibrated machine (./calibrate.ts):
 *
 *   step = compute + optimizer + exposed all-reduce (+ checkpoint when the step saves)
 *
 * - compute: tokens per rank × (matmul FLOPs per token / the calibrated matmul rate +
 *   attention FLOPs per token / the calibrated attention rate), FLOPs from
 *   src/metrics/flops.ts; ranks beyond the machine's cores share them, so compute
 *   stretches by max(1, ranks / cores). Elementwise work (tanh, softmax, norms) is
 *   not counted.
 * - optimizer: the bytes one step streams per parameter (AdamW: read p, g, m, v and
 *   write p, m, v = 28; SGD: read p, g, write p = 12) at the calibrated copy bandwidth,
 *   divided among the ranks that share the memory (each rank updates its own replica).
 * - all-reduce: the float32 gradients in DDP's buckets (1 MiB first, then 25 MiB),
 *   each a ring all-reduce t = 2(n−1)·α + 2(n−1)/n · bytes/B with α and B fitted by
 *   calibrate(), plus the loss's scalar all-reduce. Backward (2/3 of the compute)
 *   hides it only while a core is free for the communication thread (ranks < cores);
 *   otherwise it is all exposed.
 * - checkpoint: weights + optimizer state written at the calibrated disk bandwidth,
 *   a blocking write (an upper bound for train()'s overlapped saves).
 */
import { gptModelFlops, modelFlops } from '../metrics/flops.js';
import type { GPTConfig } from '../models/gpt/gpt.js';
import type { TinyLMConfig } from '../models/tiny-lm/tiny-lm.js';
import { NcclNodeError } from '../errors.js';
import type { Calibration, HardwareProfile } from './profile.js';

export type ExampleModel = { kind: 'tiny-lm'; config: TinyLMConfig } | { kind: 'gpt'; config: GPTConfig };

export interface PredictInput {
  model: ExampleModel;
  ranks: number;
  /** Sequences per optimizer step over all ranks. */
  globalBatch: number;
  optimizer?: 'adamw' | 'sgd';
  /** DDP's bucket caps (its defaults: 1 MiB, 25 MiB). */
  firstBucketBytes?: number;
  bucketBytes?: number;
}

export interface Prediction {
  ranks: number;
  params: number;
  tokensPerRank: number;
  /** Training FLOPs per token: 6 × matmul weights, and attention's. */
  flopsPerToken: { matmul: number; attention: number };
  /** max(1, ranks / cores). */
  oversubscription: number;
  computeSeconds: number;
  optimizerSeconds: number;
  buckets: number;
  allReduceSeconds: number;
  exposedAllReduceSeconds: number;
  stepSeconds: number;
  checkpoint: { bytes: number; seconds: number };
  /** A step that also saves a checkpoint. */
  stepWithCheckpointSeconds: number;
}

/** Parameters of the example models, every tensor counted (src/models/tiny-lm/tiny-lm.ts, src/models/gpt/gpt.ts). */
export function paramCount(m: ExampleModel): number {
  if (m.kind === 'tiny-lm') {
    const { vocab: V, dim: D, hidden: H, layers: L, seqLen: T } = m.config;
    // tok, pos; per block mix, w1, b1, w2, b2; head w, b.
    return V * D + T * D + L * (D + D * H + H + H * D + D) + D * V + V;
  }
  const { vocab: V, dim: D, hidden: H, layers: L, seqLen: T } = m.config;
  // wte, wpe; per block ln1 g/b, qkv w/b, proj w/b, ln2 g/b, fc1 w/b, fc2 w/b; final norm g/b; head w (no bias).
  return V * D + T * D + L * (2 * D + 3 * D * D + 3 * D + D * D + D + 2 * D + D * H + H + H * D + D) + 2 * D + D * V;
}

/** Ring all-reduce of `bytes` on n ranks under the fitted model. */
export function ringSeconds(c: Calibration['allReduce'], n: number, bytes: number): number {
  if (n <= 1) return 0;
  return 2 * (n - 1) * c.latencySeconds + (2 * (n - 1) / n) * (bytes / c.busBandwidth);
}

const MiB = 2 ** 20;

export function predict(profile: HardwareProfile | Calibration, input: PredictInput): Prediction {
  const c = 'calibration' in profile ? profile.calibration : profile;
  const n = input.ranks;
  if (!Number.isInteger(n) || n < 1) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `predict: ranks: expected a positive integer, got ${n}`);
  if (!Number.isInteger(input.globalBatch) || input.globalBatch % n !== 0) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `predict: globalBatch: expected a multiple of ranks (${n}), got ${input.globalBatch}`);
  }
  const cfg = input.model.config;
  const f = input.model.kind === 'tiny-lm' ? { perToken: modelFlops(cfg).perToken, attentionPerToken: 0 } : gptModelFlops(cfg);
  const params = paramCount(input.model);
  const tokensPerRank = (input.globalBatch / n) * cfg.seqLen;
  const oversubscription = Math.max(1, n / c.cores);
  const computeSeconds = tokensPerRank * (f.perToken / c.matmul.flopsPerSecond + f.attentionPerToken / c.attention.flopsPerSecond) * oversubscription;

  const adam = (input.optimizer ?? 'adamw') === 'adamw';
  const ranksSharingMemory = Math.min(n, c.cores);
  const optimizerSeconds = (params * (adam ? 28 : 12)) / (c.memoryBandwidth / ranksSharingMemory) * oversubscription;

  const gradBytes = params * 4;
  const first = input.firstBucketBytes ?? MiB, cap = input.bucketBytes ?? 25 * MiB;
  const sizes = [Math.min(gradBytes, first)];
  for (let left = gradBytes - sizes[0]!; left > 0; left -= cap) sizes.push(Math.min(left, cap));
  const allReduceSeconds = n <= 1 ? 0 : sizes.reduce((s, b) => s + ringSeconds(c.allReduce, n, b), 0) + ringSeconds(c.allReduce, n, 8);
  const exposedAllReduceSeconds = n < c.cores ? Math.max(0, allReduceSeconds - (2 / 3) * computeSeconds) : allReduceSeconds;

  const stepSeconds = computeSeconds + optimizerSeconds + exposedAllReduceSeconds;
  const ckptBytes = params * (4 + (adam ? 8 : 0));
  const ckptSeconds = ckptBytes / c.disk.bandwidth;
  return {
    ranks: n, params, tokensPerRank, flopsPerToken: { matmul: f.perToken, attention: f.attentionPerToken }, oversubscription,
    computeSeconds, optimizerSeconds, buckets: sizes.length, allReduceSeconds, exposedAllReduceSeconds, stepSeconds,
    checkpoint: { bytes: ckptBytes, seconds: ckptSeconds }, stepWithCheckpointSeconds: stepSeconds + ckptSeconds,
  };
}
