/**
 * Runtime options, validated once with zod at construction; a bad field is
 * ERR_INVALID_ARGUMENT naming the class and the field (via comm/call-options parse).
 */
import { z } from 'zod';

export { parse } from '../comm/call-options.js';

const bytes = z.number().int().min(1);

export const ddpSchema = z.strictObject({
  /** Cap of the bucket holding the first-registered parameters (ready last in backward). PyTorch: 1 MiB. */
  firstBucketBytes: bytes.default(1024 * 1024),
  /** Cap of every other bucket. PyTorch: 25 MiB. */
  bucketBytes: bytes.default(25 * 1024 * 1024),
  /** 'mean' divides the sum by the world size (loss averaged over ranks). */
  reduce: z.enum(['mean', 'sum']).default('mean'),
  /** Reduce in 16 bits (divided by the world size first, to avoid overflow); the result is float32. */
  compression: z.enum(['none', 'bfloat16', 'float16']).default('none'),
  /** Copy rank 0's parameters to every rank at construction, as DDP does. */
  broadcastParams: z.boolean().default(true),
});
export type DDPOptions = z.input<typeof ddpSchema>;

export const fsdpSchema = z.strictObject({
  /** ZeRO stage: 1 optimizer state, 2 + gradients, 3 + parameters. */
  stage: z.union([z.literal(1), z.literal(2), z.literal(3)]),
  /** Dtype of the unsharded parameters the model computes with (and of the stage-3 all-gather). */
  paramDtype: z.enum(['float32', 'bfloat16']).default('float32'),
  /** Dtype of the gradient reduce-scatter; defaults to paramDtype. */
  reduceDtype: z.enum(['float32', 'bfloat16', 'float16']).optional(),
  reduce: z.enum(['mean', 'sum']).default('mean'),
  /** Stage 3: gather the next unit while the current one computes. */
  prefetch: z.boolean().default(true),
  /** Stage 3: free gathered parameters after forward and gather again for backward. */
  reshardAfterForward: z.boolean().default(true),
  /** Copy rank 0's parameters to every rank before sharding. */
  broadcastParams: z.boolean().default(true),
});
export type FSDPOptions = z.input<typeof fsdpSchema> & {
  /** Hybrid sharding: a communicator over the replicas of this rank's shard (mesh.get('replicate')). */
  replicate?: import('../comm/communicator.js').Communicator | null;
};

export const adamwSchema = z.strictObject({
  kind: z.literal('adamw'),
  lr: z.number().positive(),
  beta1: z.number().min(0).max(1).default(0.9),
  beta2: z.number().min(0).max(1).default(0.999),
  eps: z.number().positive().default(1e-8),
  weightDecay: z.number().min(0).default(0),
});
export const sgdSchema = z.strictObject({
  kind: z.literal('sgd'),
  lr: z.number().positive(),
  momentum: z.number().min(0).max(1).default(0),
  weightDecay: z.number().min(0).default(0),
});
export const optimizerSchema = z.discriminatedUnion('kind', [adamwSchema, sgdSchema]);
export type OptimizerOptions = z.input<typeof optimizerSchema>;

export const meshSchema = z.strictObject({
  pp: z.number().int().min(1).default(1),
  replicate: z.number().int().min(1).default(1),
  dp: z.number().int().min(1).default(1),
  tp: z.number().int().min(1).default(1),
});
export type MeshOptions = z.input<typeof meshSchema>;
