/**
 * Every knob of the POC and its default, as one zod schema (docs/poc.md lists
 * them). A run's configuration is the defaults, then the --small overlay, then
 * the user's poc.json (any subset, section by section), parsed once; the resolved
 * configuration is written beside the report so every gang reads the same one.
 */
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import { NcclNodeError } from '../errors.js';
import { MODEL_KINDS } from '../models/language-model.js';

const pos = () => z.number().positive();
const posInt = () => z.number().int().positive();
const frac = () => z.number().min(0).max(1);

export const pocSchema = z.strictObject({
  seed: z.number().int().default(1234),
  connectivity: z.strictObject({
    /** All-reduce sweep from minBytes to maxBytes, doubling. */
    minBytes: posInt().default(8),
    maxBytes: posInt().default(64 * 2 ** 20),
    iters: posInt().default(20),
    warmup: z.number().int().min(0).default(2),
    /** Peak bus bandwidth over the sweep, GB/s. 0.05 passes a healthy 2-rank Gloo run on loopback; set ~ your fabric's rating on a cluster. */
    minBusBwGBs: z.number().min(0).default(0.05),
    /** TCP retransmitted / sent segments during the sweep, percent (/proc/net/snmp). */
    maxRetransPct: z.number().min(0).default(1),
  }).prefault({}),
  data: z.strictObject({
    tokenizer: z.string().default('cl100k_base'),
    /** Pretraining corpus size in bytes of text. */
    corpusBytes: posInt().default(1_000_000),
    /** Problems a+b with operands 0..maxOperand; heldOutFraction of the pairs never appear in training. */
    maxOperand: z.number().int().min(1).max(499).default(99),
    heldOutFraction: z.number().gt(0).lt(1).default(0.2),
  }).prefault({}),
  model: z.strictObject({
    /** Which model every stage trains and serves: TinyLM, or the GPT of src/models/gpt. */
    kind: z.enum(MODEL_KINDS, { error: (i) => `expected one of ${MODEL_KINDS.join(', ')}, received ${JSON.stringify(i.input)}` }).default('tiny-lm'),
    dim: posInt().default(64),
    /** TinyLM's block width; the GPT's MLP width. */
    hidden: posInt().default(256),
    layers: posInt().default(2),
    seqLen: posInt().default(32),
    /** The GPT's attention heads (dim must divide by it); TinyLM has none. */
    heads: posInt().default(4),
  }).prefault({}).refine((m) => m.kind !== 'gpt' || m.dim % m.heads === 0, {
    path: ['heads'], error: 'the GPT needs dim divisible by heads',
  }),
  pretrain: z.strictObject({
    /** The schedule in tokens (steps = tokens / (globalBatch x seqLen)): 1,000,000 as the seeds' probe. */
    tokens: posInt().default(1_000_000),
    globalBatch: posInt().default(16),
    lr: pos().default(3e-3),
    /** ZeRO stage of the FSDP run (2 shards gradients and optimizer state, 3 also parameters). */
    stage: z.union([z.literal(2), z.literal(3)]).default(3),
    paramDtype: z.enum(['float32', 'bfloat16']).default('bfloat16'),
    /** Gate: 1 - mean(last 10% losses) / mean(first 10%) must reach this. */
    minLossDrop: frac().default(0.2),
    /** The mid-run checkpoint, as a fraction of the steps (the restore stage resumes from it). */
    midFraction: z.number().gt(0).lt(1).default(0.5),
  }).prefault({}),
  checkpoint: z.strictObject({
    /** Write / read throughput gates in GB/s. The cluster target is 10 GB/s; these defaults fit a laptop-class disk and a tiny model. */
    minWriteGBs: z.number().min(0).default(0.001),
    minReadGBs: z.number().min(0).default(0.001),
  }).prefault({}),
  finetune: z.strictObject({
    steps: posInt().default(300),
    globalBatch: posInt().default(16),
    lr: pos().default(1e-3),
    minAccuracy: frac().default(0.05),
  }).prefault({}),
  inference: z.strictObject({
    workers: posInt().default(2),
    /** Requests per second offered (open loop). */
    rate: pos().default(20),
    requests: posInt().default(200),
    minSamples: posInt().default(100),
    /** The seeds' serving SLOs: p95 <= 200 ms, p99 <= 500 ms end to end. */
    p95Ms: pos().default(200),
    p99Ms: pos().default(500),
    maxTokens: posInt().default(4),
    /** Exact-match accuracy of the served candidate on the held-out problems. */
    minAccuracy: frac().default(0.05),
  }).prefault({}),
  budget: z.strictObject({
    /** Stop once wall seconds x ranks / 3600 crosses this (GPU-hours on nccl); null: no limit. */
    coreHours: z.number().positive().nullable().default(null),
    /** Price per core-hour (GPU-hour) for the cost line. */
    price: z.number().min(0).default(0),
  }).prefault({}),
});

export type PocConfig = z.output<typeof pocSchema>;
export type PocConfigInput = z.input<typeof pocSchema>;

/** What --small changes: a schedule of seconds on two cores. */
export const SMALL: PocConfigInput = {
  connectivity: { maxBytes: 2 ** 20, iters: 5, warmup: 1 },
  // 100 pairs (20 held out): enough for a few hundred finetune steps to gain held-out problems.
  data: { corpusBytes: 60_000, maxOperand: 9 },
  model: { dim: 32, hidden: 64, layers: 2, seqLen: 16 },
  pretrain: { tokens: 40_000, globalBatch: 8, lr: 1e-2 },
  // A 170 kB checkpoint is latency-bound (fsync, commit): its throughput says little about the disk.
  checkpoint: { minWriteGBs: 0.0002, minReadGBs: 0.0002 },
  finetune: { steps: 300, globalBatch: 16, lr: 1e-2 },
  inference: { requests: 40, minSamples: 20, rate: 20 },
};

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

function merge(a: Obj, b: Obj): Obj {
  const out: Obj = { ...a };
  for (const [k, v] of Object.entries(b)) out[k] = isObj(v) && isObj(out[k]) ? merge(out[k] as Obj, v) : v;
  return out;
}

/** Defaults, then the small overlay, then `user` (a parsed poc.json); bad knobs are ERR_INVALID_ARGUMENT naming them. */
export function resolvePocConfig(user: unknown = {}, o: { small?: boolean } = {}): PocConfig {
  if (!isObj(user)) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `POC config: expected a JSON object, received ${JSON.stringify(user)}`);
  const r = pocSchema.safeParse(merge(o.small ? (SMALL as Obj) : {}, user));
  if (!r.success) {
    const why = r.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `POC config: ${why}`);
  }
  return r.data;
}

export async function readPocConfig(path: string | undefined, o: { small?: boolean } = {}): Promise<PocConfig> {
  if (!path) return resolvePocConfig({}, o);
  let user: unknown;
  try {
    user = JSON.parse(await readFile(path, 'utf8'));
  } catch (err) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `POC config ${path}: expected a readable JSON file: ${(err as Error).message}`, { file: path });
  }
  return resolvePocConfig(user, o);
}

/** Optimizer steps of the pretraining schedule. */
export function pretrainSteps(c: PocConfig): number {
  return Math.max(10, Math.round(c.pretrain.tokens / (c.pretrain.globalBatch * c.model.seqLen)));
}
