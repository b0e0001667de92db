/**
 * A small GPT (GPT-2's block, pre-norm), forward and backward by hand on Float32Array:
 *
 *   embed:   x = wte[tok] + wpe[t]
 *   block l: x = x + proj(attn(ln1(x)))        multi-head causal self-attention
 *            x = x + fc2(gelu(fc1(ln2(x))))    MLP
 *   head:    logits = lnf(x)·Wout, softmax cross-entropy on the next token
 *
 * The same contract as TinyLM (params, units, forwardBackward with the runtime's
 * hooks), so DDP, FSDP and the training loop take either. Units (FSDP's wrapping
 * granularity, the pipeline's split points) are embed, each block, and head.
 */
import type { ModelHooks } from '../../runtime/index.js';
import { linear, linearBackward, linearBackwardSplit, rng, type DeferredWeightGrads } from '../tiny-lm/kernels.js';
import { NcclNodeError } from '../../errors.js';
import { Param } from '../tiny-lm/tiny-lm.js';
import { attention, attentionBackward, gelu, geluBackward, layerNorm, layerNormBackward, type NormSaved } from './layers.js';

export interface GPTConfig {
  vocab: number;
  dim: number;
  heads: number;
  layers: number;
  seqLen: number;
  /** MLP width (GPT-2: 4 x dim). */
  hidden: number;
  seed: number;
}

export const GPT_TEST_CONFIG: GPTConfig = { vocab: 61, dim: 24, heads: 4, layers: 2, seqLen: 8, hidden: 96, seed: 11 };

/** One block's parameters (P: Param, or a tensor-parallel shard of one). */
export interface GPTBlock<P extends Param = Param> { ln1g: P; ln1b: P; qkvW: P; qkvB: P; projW: P; projB: P; ln2g: P; ln2b: P; fc1W: P; fc1B: P; fc2W: P; fc2B: P }
/** What a block's backward needs from its forward; `out` is the block's output. */
export interface BlockSaved { n1: NormSaved; a: Float32Array; qkv: Float32Array; probs: Float32Array; att: Float32Array; n2: NormSaved; c: Float32Array; f: Float32Array; m: Float32Array; out: Float32Array }

/** Token n's input (shift 0) or target (shift 1) in rows of seqLen+1 tokens. */
export const tokenAt = (tokens: Int32Array, T: number, n: number, shift: number): number => tokens[Math.floor(n / T) * (T + 1) + (n % T) + shift]!;

type Maybe<T> = T | Promise<T>;

/** GPT's unit steps, as GPT and TensorParallelGPT both provide them (the latter with collectives inside). */
export interface GPTUnits<S extends { out: Float32Array } = { out: Float32Array }> {
  readonly cfg: GPTConfig;
  readonly units: Param[][];
  embedForward(tokens: Int32Array, batch: number): Maybe<Float32Array>;
  embedBackward(tokens: Int32Array, batch: number, dx: Float32Array): Maybe<void>;
  /** Rows of the activations between units for `batch` sequences (batch x seqLen unless they are split, as sequence parallelism does). */
  activationRows?(batch: number): number;
  blockForward(l: number, x: Float32Array, batch: number): Maybe<S>;
  blockBackward(l: number, saved: S, dOut: Float32Array, batch: number, later?: DeferredWeightGrads): Maybe<Float32Array>;
  headForwardBackward(x: Float32Array, tokens: Int32Array, batch: number, gradScale: number): Maybe<{ loss: number; dx: Float32Array }>;
}

/**
 * One forward and backward through a model's unit steps, calling the runtime's hooks
 * at unit boundaries (units: embed, each block, head) and gradReady for a unit's
 * parameters once its backward ran. GPT and TensorParallelGPT both train this way.
 */
export async function unitsForwardBackward<S extends { out: Float32Array }>(
  m: GPTUnits<S>, tokens: Int32Array, batch: number, opts: { gradScale: number; hooks?: ModelHooks },
): Promise<number> {
  const L = m.cfg.layers;
  const hk = opts.hooks ?? {};
  const ready = (u: number): void => {
    if (hk.gradReady) for (const p of m.units[u]!) hk.gradReady(p);
  };
  await hk.beforeForward?.(0);
  let x = await m.embedForward(tokens, batch);
  hk.afterForward?.(0);
  const saved: S[] = [];
  for (let l = 0; l < L; l++) {
    await hk.beforeForward?.(l + 1);
    const s = await m.blockForward(l, x, batch);
    saved.push(s);
    x = s.out;
    hk.afterForward?.(l + 1);
  }
  // The head's forward runs inside its backward (the loss and its gradient come together).
  await hk.beforeForward?.(L + 1);
  hk.afterForward?.(L + 1);
  await hk.beforeBackward?.(L + 1);
  const head = await m.headForwardBackward(x, tokens, batch, opts.gradScale);
  ready(L + 1);
  hk.afterBackward?.(L + 1);
  let dx = head.dx;
  for (let l = L - 1; l >= 0; l--) {
    await hk.beforeBackward?.(l + 1);
    dx = await m.blockBackward(l, saved[l]!, dx, batch);
    ready(l + 1);
    hk.afterBackward?.(l + 1);
  }
  await hk.beforeBackward?.(0);
  await m.embedBackward(tokens, batch, dx);
  ready(0);
  hk.afterBackward?.(0);
  return head.loss / (batch * m.cfg.seqLen);
}

export class GPT {
  readonly params: Param[] = [];
  readonly units: Param[][] = [];
  readonly wte: Param;
  readonly wpe: Param;
  readonly blocks: GPTBlock[] = [];
  readonly lnfG: Param;
  readonly lnfB: Param;
  readonly wOut: Param;

  /**
   * `units`, when given, are the only units (0 the embeddings, l + 1 block l, L + 1 the
   * head) whose parameters this process allocates, as a pipeline stage needs: the
   * others still draw their initial values from the seeded generator, so the kept
   * ones equal the full model's, but hold no memory and are not in params/units.
   */
  constructor(readonly cfg: GPTConfig, units?: ReadonlySet<number>) {
    const { vocab: V, dim: D, heads, hidden: H, seqLen: T, layers: L } = cfg;
    if (D % heads !== 0) throw new RangeError(`GPT: dim ${D} must divide by heads ${heads}`);
    this.#keep = units;
    const r = rng(cfg.seed);
    // GPT-2's init: normal(0, 0.02) approximated by a uniform of the same variance,
    // residual projections scaled by 1/√(2L).
    const uniform = (std: number) => () => (r() * 2 - 1) * std * Math.sqrt(3);
    const zero = () => 0, one = () => 1;
    this.wte = this.#param(0, 'embed.wte', [V, D], uniform(0.02));
    this.wpe = this.#param(0, 'embed.wpe', [T, D], uniform(0.01));
    for (let l = 0; l < L; l++) {
      const u = l + 1, p = `block${l}.`;
      this.blocks.push({
        ln1g: this.#param(u, `${p}ln1.g`, [D], one),
        ln1b: this.#param(u, `${p}ln1.b`, [D], zero),
        qkvW: this.#param(u, `${p}attn.qkv.w`, [D, 3 * D], uniform(0.02)),
        qkvB: this.#param(u, `${p}attn.qkv.b`, [3 * D], zero),
        projW: this.#param(u, `${p}attn.proj.w`, [D, D], uniform(0.02 / Math.sqrt(2 * L))),
        projB: this.#param(u, `${p}attn.proj.b`, [D], zero),
        ln2g: this.#param(u, `${p}ln2.g`, [D], one),
        ln2b: this.#param(u, `${p}ln2.b`, [D], zero),
        fc1W: this.#param(u, `${p}mlp.fc1.w`, [D, H], uniform(0.02)),
        fc1B: this.#param(u, `${p}mlp.fc1.b`, [H], zero),
        fc2W: this.#param(u, `${p}mlp.fc2.w`, [H, D], uniform(0.02 / Math.sqrt(2 * L))),
        fc2B: this.#param(u, `${p}mlp.fc2.b`, [D], zero),
      });
    }
    this.lnfG = this.#param(L + 1, 'head.lnf.g', [D], one);
    this.lnfB = this.#param(L + 1, 'head.lnf.b', [D], zero);
    this.wOut = this.#param(L + 1, 'head.w', [D, V], uniform(0.02));
  }

  get numParams(): number {
    return this.params.reduce((a, p) => a + p.size, 0);
  }

  readonly #keep: ReadonlySet<number> | undefined;

  #add(unit: number, p: Param): Param {
    (this.units[unit] ??= []).push(p);
    this.params.push(p);
    return p;
  }

  /** A parameter of `unit`: allocated, or (a unit this process does not keep) its values drawn and dropped. */
  #param(unit: number, name: string, shape: number[], init: (i: number) => number): Param {
    this.units[unit] ??= [];
    if (!this.#keep || this.#keep.has(unit)) return this.#add(unit, new Param(name, shape, init));
    const size = shape.reduce((a, b) => a * b, 1);
    for (let i = 0; i < size; i++) init(i);
    return new Param(name, [0], init);
  }

  /**
   * Forward and backward on `batch` sequences of seqLen+1 tokens (inputs and shifted
   * targets). Gradients of the summed token loss times gradScale accumulate into each
   * param.grad; returns the mean token loss. Composed of the unit steps below, which
   * the pipeline runs stage by stage.
   */
  forwardBackward(tokens: Int32Array, batch: number, opts: { gradScale: number; hooks?: ModelHooks }): Promise<number> {
    return unitsForwardBackward(this, tokens, batch, opts);
  }

  /**
   * Inference: next-token logits for one sequence of 1..seqLen tokens, no gradients,
   * no hooks. `last` (default) returns the final position's logits ([vocab]);
   * otherwise every position's ([tokens.length, vocab], row t predicting token t + 1).
   * The training forward runs on the sequence padded to seqLen: attention is causal
   * and the norms are per row, so what follows position n - 1 changes nothing before
   * it, and the logits are the ones training computes for that prefix.
   */
  logits(tokens: ArrayLike<number>, o: { last?: boolean } = {}): Float32Array {
    const { dim: D, vocab: V, seqLen: T, layers: L } = this.cfg;
    const n = tokens.length;
    if (n < 1 || n > T) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `GPT.logits: expected 1..${T} tokens, received ${n}`);
    const row = new Int32Array(T + 1);
    for (let t = 0; t < n; t++) {
      const id = tokens[t]!;
      if (!(Number.isInteger(id) && id >= 0 && id < V)) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `GPT.logits: token ${t} is ${id}, expected an id in 0..${V - 1}`);
      row[t] = id;
    }
    let x = this.embedForward(row, 1);
    for (let l = 0; l < L; l++) x = this.blockForward(l, x, 1).out;
    const first = o.last === false ? 0 : n - 1;
    const rows = n - first;
    const lf = new Float32Array(rows * D);
    layerNorm(x.subarray(first * D, n * D), this.lnfG.data, this.lnfB.data, lf, rows, D);
    const logits = new Float32Array(rows * V);
    linear(lf, this.wOut.data, null, logits, rows, D, V);
    return logits;
  }

  /** x = wte[tok] + wpe[t] for the inputs of `batch` rows of seqLen+1 tokens. */
  embedForward(tokens: Int32Array, batch: number): Float32Array {
    const { dim: D, seqLen: T } = this.cfg;
    const N = batch * T;
    const x = new Float32Array(N * D);
    for (let n = 0; n < N; n++) {
      const to = tokenAt(tokens, T, n, 0) * D, po = (n % T) * D, xo = n * D;
      for (let d = 0; d < D; d++) x[xo + d] = this.wte.data[to + d]! + this.wpe.data[po + d]!;
    }
    return x;
  }

  embedBackward(tokens: Int32Array, batch: number, dx: Float32Array): void {
    const { dim: D, seqLen: T } = this.cfg;
    const dte = this.wte.grad, dpe = this.wpe.grad;
    for (let n = 0; n < batch * T; n++) {
      const to = tokenAt(tokens, T, n, 0) * D, po = (n % T) * D, xo = n * D;
      for (let d = 0; d < D; d++) {
        dte[to + d] = dte[to + d]! + dx[xo + d]!;
        dpe[po + d] = dpe[po + d]! + dx[xo + d]!;
      }
    }
  }

  /** Block l on x (N x D); the result's `out` is the block's output, the rest is kept for the backward. */
  blockForward(l: number, x: Float32Array, batch: number): BlockSaved {
    const { dim: D, hidden: H, seqLen: T, heads } = this.cfg;
    const N = batch * T;
    const b = this.blocks[l]!;
    const a = new Float32Array(N * D);
    const n1 = layerNorm(x, b.ln1g.data, b.ln1b.data, a, N, D);
    const qkv = new Float32Array(N * 3 * D);
    linear(a, b.qkvW.data, b.qkvB.data, qkv, N, D, 3 * D);
    const att = new Float32Array(N * D);
    const probs = attention(qkv, att, { batch, T, D, heads });
    const x1 = new Float32Array(N * D);
    linear(att, b.projW.data, b.projB.data, x1, N, D, D);
    for (let i = 0; i < x1.length; i++) x1[i] = x1[i]! + x[i]!;
    const c = new Float32Array(N * D);
    const n2 = layerNorm(x1, b.ln2g.data, b.ln2b.data, c, N, D);
    const f = new Float32Array(N * H);
    linear(c, b.fc1W.data, b.fc1B.data, f, N, D, H);
    const m = new Float32Array(N * H);
    gelu(f, m);
    const out = new Float32Array(N * D);
    linear(m, b.fc2W.data, b.fc2B.data, out, N, H, D);
    for (let i = 0; i < out.length; i++) out[i] = out[i]! + x1[i]!;
    return { n1, a, qkv, probs, att, n2, c, f, m, out };
  }

  /**
   * Gradients of block l's parameters accumulate; returns the gradient of its input
   * (dOut is consumed). With `later`, the linear layers' weight gradients are queued
   * there instead (a zero-bubble schedule's W pass); the norms' stay here.
   */
  blockBackward(l: number, s: BlockSaved, dOut: Float32Array, batch: number, later?: DeferredWeightGrads): Float32Array {
    const { dim: D, hidden: H, seqLen: T, heads } = this.cfg;
    const N = batch * T;
    const b = this.blocks[l]!;
    // MLP: dOut is the gradient of out = x1 + fc2(gelu(fc1(ln2(x1)))).
    const dm = new Float32Array(N * H);
    linearBackwardSplit(later, s.m, b.fc2W.data, dOut, dm, b.fc2W.grad, b.fc2B.grad, N, H, D);
    geluBackward(s.f, dm);
    const dc = new Float32Array(N * D);
    linearBackwardSplit(later, s.c, b.fc1W.data, dm, dc, b.fc1W.grad, b.fc1B.grad, N, D, H);
    const dx1 = dOut; // the residual path; LN2's gradient adds into it
    layerNormBackward(dc, s.n2, b.ln2g.data, dx1, b.ln2g.grad, b.ln2b.grad, N, D);
    // Attention: x1 = x + proj(attn(ln1(x))).
    const datt = new Float32Array(N * D);
    linearBackwardSplit(later, s.att, b.projW.data, dx1, datt, b.projW.grad, b.projB.grad, N, D, D);
    const dqkv = new Float32Array(N * 3 * D);
    attentionBackward(s.qkv, s.probs, datt, dqkv, { batch, T, D, heads });
    const da = new Float32Array(N * D);
    linearBackwardSplit(later, s.a, b.qkvW.data, dqkv, da, b.qkvW.grad, b.qkvB.grad, N, D, 3 * D);
    layerNormBackward(da, s.n1, b.ln1g.data, dx1, b.ln1g.grad, b.ln1b.grad, N, D);
    return dx1;
  }

  /**
   * Final norm, output head and softmax cross-entropy on the targets, then their
   * backward: returns the summed token loss and the gradient of the head's input.
   */
  headForwardBackward(x: Float32Array, tokens: Int32Array, batch: number, gradScale: number): { loss: number; dx: Float32Array } {
    const { dim: D, vocab: V, seqLen: T } = this.cfg;
    const N = batch * T;
    const lf = new Float32Array(N * D);
    const nf = layerNorm(x, this.lnfG.data, this.lnfB.data, lf, N, D);
    const logits = new Float32Array(N * V);
    linear(lf, this.wOut.data, null, logits, N, D, V);
    // logits become dloss/dlogits in place
    let loss = 0;
    for (let n = 0; n < N; n++) {
      const o = n * V;
      let max = -Infinity;
      for (let v = 0; v < V; v++) max = Math.max(max, logits[o + v]!);
      let sum = 0;
      for (let v = 0; v < V; v++) sum += Math.exp(logits[o + v]! - max);
      const target = tokenAt(tokens, T, n, 1);
      loss += Math.log(sum) + max - logits[o + target]!;
      for (let v = 0; v < V; v++) logits[o + v] = (Math.exp(logits[o + v]! - max) / sum) * gradScale;
      logits[o + target] = logits[o + target]! - gradScale;
    }
    const dlf = new Float32Array(N * D);
    linearBackward(lf, this.wOut.data, logits, dlf, this.wOut.grad, null, N, D, V);
    const dx = new Float32Array(N * D);
    layerNormBackward(dlf, nf, this.lnfG.data, dx, this.lnfG.grad, this.lnfB.grad, N, D);
    return { loss, dx };
  }
}
