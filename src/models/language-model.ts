/**
 * What the training loop and the POC ask of a model, whichever it is: its
 * parameters grouped in units (what DDP/FSDP wrap), a forward and backward with
 * the runtime's hooks, and next-token logits for decoding. TinyLM and GPT both
 * implement it; a ModelConfig names which one to build.
 */
import { NcclNodeError } from '../errors.js';
import type { ModelHooks } from '../runtime/index.js';
import { GPT, type GPTConfig } from './gpt/gpt.js';
import { TinyLM, type Param, type TinyLMConfig } from './tiny-lm/tiny-lm.js';

export interface LanguageModel {
  readonly cfg: { vocab: number; seqLen: number };
  /** Every parameter, in registration order (the order checkpoints and SHA-256s use). */
  readonly params: Param[];
  /** Parameters by unit: embeddings, each block, head. */
  readonly units: Param[][];
  /** Mean token loss of `batch` rows of seqLen + 1 tokens; gradients times gradScale accumulate. */
  forwardBackward(tokens: Int32Array, batch: number, opts: { gradScale: number; hooks?: ModelHooks }): Promise<number>;
  /** Next-token logits of one sequence of 1..seqLen tokens: the last position's ([vocab]), or every one's with last: false. */
  logits(tokens: ArrayLike<number>, o?: { last?: boolean }): Float32Array;
}

/** TinyLM's config (kind absent or 'tiny-lm'), or GPT's with kind 'gpt'. */
export type ModelConfig = (TinyLMConfig & { kind?: 'tiny-lm' }) | (GPTConfig & { kind: 'gpt' });
export const MODEL_KINDS = ['tiny-lm', 'gpt'] as const;
export type ModelKind = (typeof MODEL_KINDS)[number];

export const modelKind = (cfg: ModelConfig): ModelKind => cfg.kind ?? 'tiny-lm';

/** The model `cfg` names, initialised from its seed. */
export function createModel(cfg: ModelConfig): LanguageModel {
  const kind = (cfg as { kind?: unknown }).kind ?? 'tiny-lm';
  if (kind === 'tiny-lm') return new TinyLM(cfg as TinyLMConfig);
  if (kind === 'gpt') return new GPT(cfg as GPTConfig);
  throw new NcclNodeError('ERR_INVALID_ARGUMENT', `model kind: expected one of ${MODEL_KINDS.join(', ')}, received ${JSON.stringify(kind)}`);
}
