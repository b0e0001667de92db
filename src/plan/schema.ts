/**
 * Inputs of plan() and simulate(), validated once with zod; a bad field is an
 * NcclNodeError ERR_INVALID_ARGUMENT naming the field, what was expected and what came.
 */
import { z } from 'zod';
import { NcclNodeError } from '../errors.js';
import { GPU_TYPES } from './hardware.js';

const pos = z.number().positive();
const posInt = z.number().int().positive();
const fraction = z.number().gt(0).max(1);

/**
 * Per-GPU MTBF implied by Llama 3's 419 unexpected interruptions in 54 days on
 * 16,384 H100s (Llama 3 Herd of Models, 2024, section 3.3.4): 16384·54·24/419 h.
 */
export const LLAMA3_GPU_MTBF_HOURS = (16384 * 54 * 24) / 419;

export const modelSchema = z.strictObject({
  /** Parameter count; when absent, 12·L·h² + V·h from the shape. */
  params: pos.optional(),
  layers: posInt.optional(),
  hidden: posInt.optional(),
  heads: posInt.optional(),
  /** Sequence length (tokens per sample). */
  seq: posInt.optional(),
  vocab: posInt.optional(),
}).refine((m) => m.params !== undefined || (m.layers !== undefined && m.hidden !== undefined && m.vocab !== undefined),
  { message: 'expected params, or layers + hidden + vocab' });

export const layoutSchema = z.strictObject({
  dp: posInt,
  tp: posInt.default(1),
  pp: posInt.default(1),
  /** Micro-batches per step per pipeline (m). */
  microBatches: posInt.default(1),
  /** Samples per micro-batch (b). */
  microBatchSize: posInt.default(1),
  schedule: z.enum(['1f1b', 'gpipe', 'interleaved']).default('1f1b'),
  /** Model chunks per stage for the interleaved schedule (v). */
  virtualStages: posInt.default(1),
});

/** A GPU given by its figures (a measured hardware profile's, ./profile.ts) instead of by type. */
export const gpuSpecSchema = z.strictObject({
  name: z.string().min(1),
  peakBf16Flops: pos,
  hbmBytes: pos,
  hbmBandwidth: pos,
  nvlinkBandwidth: pos,
  ibBandwidth: pos,
  nvlinkDomain: posInt,
});

export const componentSchema = z.strictObject({ name: z.string().min(1), count: posInt, mtbfHours: pos });

export const planSchema = z.strictObject({
  model: modelSchema,
  /** Training tokens (D). */
  tokens: pos,
  cluster: z.strictObject({
    gpu: z.enum(GPU_TYPES as [string, ...string[]]).default('h100-sxm'),
    /** This GPU's figures instead of the `gpu` type's (e.g. a measured hardware profile's `gpu`). */
    spec: gpuSpecSchema.optional(),
    count: posInt,
    /** GPUs per NVLink domain; defaults to the GPU type's (8, or 72 for NVL72). */
    nvlinkDomain: posInt.optional(),
  }),
  /** Fixed layout; when absent and the shape is complete, layouts are searched. */
  layout: layoutSchema.optional(),
  /** Tokens per optimizer step, for the layout search. */
  globalBatchTokens: pos.default(4 * 1024 * 1024),
  precision: z.enum(['bf16-mixed', 'fp32']).default('bf16-mixed'),
  zeroStage: z.union([z.literal(0), z.literal(1), z.literal(2), z.literal(3)]).default(1),
  recompute: z.enum(['none', 'selective', 'full']).default('none'),
  sequenceParallel: z.boolean().default(true),
  /** Model FLOPs utilization to assume; when absent, step time is computed from `efficiency`. */
  mfu: fraction.optional(),
  /** Fraction of peak FLOP/s the matrix multiplies reach, for the computed step time. */
  efficiency: fraction.default(0.6),
  /** Aggregate checkpoint storage write bandwidth, bytes/s. */
  storageBandwidth: pos.default(1e12),
  /** Blocking checkpoint cost in seconds; defaults to checkpoint bytes / storageBandwidth. */
  checkpointSeconds: pos.optional(),
  /** Time to detect a failure and restart from the last checkpoint, seconds. */
  restartSeconds: z.number().nonnegative().default(600),
  reliability: z.strictObject({
    gpuMtbfHours: pos.default(LLAMA3_GPU_MTBF_HOURS),
    /** Per-component MTBFs; when given they replace gpuMtbfHours (fleet rate = Σ count/MTBF). */
    components: z.array(componentSchema).min(1).optional(),
  }).default({ gpuMtbfHours: LLAMA3_GPU_MTBF_HOURS }),
});

export type PlanInput = z.input<typeof planSchema>;
export type PlanOptions = z.output<typeof planSchema>;
export type Layout = z.output<typeof layoutSchema>;

/** Parses `value` with `schema`; the first issue becomes ERR_INVALID_ARGUMENT. */
export function parseInput<T extends z.ZodType>(what: string, schema: T, value: unknown): z.output<T> {
  const r = schema.safeParse(value);
  if (!r.success) {
    const i = r.error.issues[0]!;
    const at = i.path.join('.') || 'input';
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${what}: ${at}: ${i.message}`, { field: at, issue: i.code });
  }
  return r.data;
}
