/**
 * GPT split Megatron-style across a tensor-parallel group of P ranks:
 *
 *   attention qkv, MLP fc1   column-parallel: each rank holds its heads' (or its
 *                            H/P hidden units') output columns; input replicated
 *   attention proj, fc2      row-parallel: the matching input rows; the partial
 *                            outputs are summed with one all-reduce (bias after it)
 *   embedding wte            vocab-parallel: rows of V/P token ids; lookups of other
 *                            ids give 0, and one all-reduce sums the rank's parts
 *   head + cross-entropy     vocab-parallel: logits for V/P ids per rank; the softmax
 *                            needs only three per-row all-reduces (max, Σexp, target)
 *                            instead of gathering N x V logits
 *   layer norms, wpe, biases replicated; their gradients come out identical on every
 *   of row-parallel layers   rank because their inputs are (so no reduction)
 *
 * Backward mirrors it: a column-parallel layer's input gradient is a partial sum
 * (all-reduce), a row-parallel layer's is already complete. Per block that is two
 * all-reduces forward and two backward, as Megatron-LM. Built from the full GPT of
 * the same config and seed, so it is the same model as one process trains.
 * Optionally sequence parallel (see the constructor).
 */
import type { ModelHooks } from '../../runtime/index.js';
import { linear, linearBackward, linearBackwardSplit, type DeferredWeightGrads } from '../tiny-lm/kernels.js';
import { Param } from '../tiny-lm/tiny-lm.js';
import { attention, attentionBackward, gelu, geluBackward, layerNorm, layerNormBackward } from './layers.js';
import { GPT, tokenAt, unitsForwardBackward, type BlockSaved, type GPTBlock, type GPTConfig } from './gpt.js';

/** Where a local tensor sits in the global one: `parts` equal slices along `dim` (per `groups` blocks of that dim). */
export interface TensorShard {
  /** Global shape. */
  shape: number[];
  dim: number;
  parts: number;
  index: number;
  /** qkv's columns are three blocks (q, k, v), each split: groups = 3. */
  groups: number;
}

export class TPParam extends Param {
  constructor(name: string, localShape: number[], data: Float32Array, readonly shard: TensorShard | null) {
    super(name, localShape, (i) => data[i]!);
  }
}

/** Rows or columns [index/parts] of a row-major 2-D (or 1-D) tensor; groups split the dim into blocks first. */
export function sliceOf(full: Float32Array, shape: number[], dim: number, parts: number, index: number, groups = 1): Float32Array {
  const rows = shape.length === 2 ? shape[0]! : 1;
  const cols = shape.length === 2 ? shape[1]! : shape[0]!;
  if (dim === 0 && shape.length === 2) return full.slice((index * rows) / parts * cols, ((index + 1) * rows) / parts * cols);
  const block = cols / groups, piece = block / parts;
  const out = new Float32Array(rows * groups * piece);
  for (let r = 0; r < rows; r++) {
    for (let g = 0; g < groups; g++) {
      const src = r * cols + g * block + index * piece;
      out.set(full.subarray(src, src + piece), (r * groups + g) * piece);
    }
  }
  return out;
}

/** The inverse of sliceOf: writes one rank's block back into the full row-major tensor. */
export function placeSlice(full: Float32Array, local: Float32Array, shard: TensorShard, index = shard.index): void {
  const { shape, dim, parts, groups } = shard;
  const rows = shape.length === 2 ? shape[0]! : 1;
  const cols = shape.length === 2 ? shape[1]! : shape[0]!;
  if (dim === 0 && shape.length === 2) return void full.set(local, ((index * rows) / parts) * cols);
  const block = cols / groups, piece = block / parts;
  for (let r = 0; r < rows; r++) {
    for (let g = 0; g < groups; g++) full.set(local.subarray((r * groups + g) * piece, (r * groups + g + 1) * piece), r * cols + g * block + index * piece);
  }
}

/**
 * What the model uses of its tensor-parallel group: a Communicator, or a
 * HostStagedComm (runtime/host-staged-comm.ts) when these host layers run over NCCL.
 */
export interface TPGroup {
  readonly rank: number;
  readonly size: number;
  allReduce(buf: Float32Array, options: { op: 'sum' | 'max' }): PromiseLike<unknown>;
  reduceScatter(send: Float32Array, recv: Float32Array, options: { op: 'sum' }): PromiseLike<unknown>;
  allGather(send: Float32Array, recv: Float32Array): PromiseLike<unknown>;
}

/** The same activations as the full model keeps, at the rank's local widths. */
export type TPBlockSaved = BlockSaved;

export class TensorParallelGPT {
  readonly params: TPParam[] = [];
  readonly units: TPParam[][] = [];
  readonly #blocks: GPTBlock<TPParam>[] = [];
  readonly #wte: TPParam;
  readonly #wpe: TPParam;
  readonly #lnfG: TPParam;
  readonly #lnfB: TPParam;
  readonly #wOut: TPParam;
  readonly #P: number;
  readonly #r: number;

  /**
   * sequenceParallel: between the tensor-parallel layers each rank keeps 1/P of the
   * token rows (Megatron-LM's sequence parallelism): layer norms, residuals and the
   * activations a pipeline sends shrink by P; each all-reduce becomes a
   * reduce-scatter plus an all-gather (the same bytes). `units`: as GPT's, the only
   * units this rank allocates (its pipeline stage's).
   */
  constructor(readonly cfg: GPTConfig, readonly tp: TPGroup, readonly sequenceParallel = false, units?: ReadonlySet<number>) {
    const P = (this.#P = tp.size), r = (this.#r = tp.rank);
    const { vocab: V, heads, hidden: H } = cfg;
    for (const [what, n] of [['vocab', V], ['heads', heads], ['hidden', H]] as const) {
      if (n % P !== 0) throw new RangeError(`tensor parallel: ${what} ${n} must divide by the group size ${P}`);
    }
    const full = new GPT(cfg, units);
    const byName = new Map(full.params.map((p) => [p.name, p]));
    const take = (unit: number, name: string, dim: number | null, groups = 1): TPParam => {
      this.units[unit] ??= [];
      const g = byName.get(name);
      if (!g) return new TPParam(name, [0], new Float32Array(0), null); // a unit this rank does not keep
      const data = dim === null ? g.data : sliceOf(g.data, g.shape, dim, P, r, groups);
      const local = dim === null ? g.shape : g.shape.map((s, i) => (i === dim ? s / P : s));
      const p = new TPParam(name, local, data, dim === null ? null : { shape: g.shape, dim, parts: P, index: r, groups });
      this.units[unit]!.push(p);
      this.params.push(p);
      return p;
    };
    const col = 1, row = 0;
    this.#wte = take(0, 'embed.wte', row);
    this.#wpe = take(0, 'embed.wpe', null);
    for (let l = 0; l < cfg.layers; l++) {
      const u = l + 1, p = `block${l}.`;
      this.#blocks.push({
        ln1g: take(u, `${p}ln1.g`, null), ln1b: take(u, `${p}ln1.b`, null),
        qkvW: take(u, `${p}attn.qkv.w`, col, 3), qkvB: take(u, `${p}attn.qkv.b`, 0, 3),
        projW: take(u, `${p}attn.proj.w`, row), projB: take(u, `${p}attn.proj.b`, null),
        ln2g: take(u, `${p}ln2.g`, null), ln2b: take(u, `${p}ln2.b`, null),
        fc1W: take(u, `${p}mlp.fc1.w`, col), fc1B: take(u, `${p}mlp.fc1.b`, 0),
        fc2W: take(u, `${p}mlp.fc2.w`, row), fc2B: take(u, `${p}mlp.fc2.b`, null),
      });
    }
    const head = cfg.layers + 1;
    this.#lnfG = take(head, 'head.lnf.g', null);
    this.#lnfB = take(head, 'head.lnf.b', null);
    this.#wOut = take(head, 'head.w', col);
  }

  async #sum(x: Float32Array): Promise<void> {
    if (this.#P > 1) await this.tp.allReduce(x, { op: 'sum' });
  }

  /**
   * Completes a partial sum over the group (a row-parallel output, a column-parallel
   * input gradient): all-reduced, or under sequence parallelism reduce-scattered so
   * each rank keeps its own rows.
   */
  async #reduceRows(partial: Float32Array): Promise<Float32Array> {
    if (!this.sequenceParallel || this.#P === 1) {
      await this.#sum(partial);
      return partial;
    }
    const local = new Float32Array(partial.length / this.#P);
    await this.tp.reduceScatter(partial, local, { op: 'sum' });
    return local;
  }

  /** Every rank's rows, in rank order (sequence parallelism); the array itself otherwise. */
  async #allRows(local: Float32Array): Promise<Float32Array> {
    if (!this.sequenceParallel || this.#P === 1) return local;
    const full = new Float32Array(local.length * this.#P);
    await this.tp.allGather(local, full);
    return full;
  }

  /** Rows of the activations between blocks: all batch x seqLen, or this rank's 1/P of them under sequence parallelism. */
  activationRows(batch: number): number {
    const N = batch * this.cfg.seqLen;
    if (!this.sequenceParallel) return N;
    if (N % this.#P !== 0) throw new RangeError(`sequence parallel: ${N} token rows must divide by the group size ${this.#P}`);
    return N / this.#P;
  }

  /**
   * Sequence parallelism leaves the replicated parameters' gradients (norms,
   * positions, row-parallel biases) summed over this rank's rows only: one
   * all-reduce completes them. Call after the backward passes of a step (collective
   * over the tp group; `params`: this rank's, e.g. one pipeline stage's). A no-op otherwise.
   */
  async finishGrads(params: readonly Param[] = this.params): Promise<void> {
    if (!this.sequenceParallel || this.#P === 1) return;
    const replicated = params.filter((p) => p instanceof TPParam && p.shard === null);
    const flat = new Float32Array(replicated.reduce((a, p) => a + p.size, 0));
    let o = 0;
    for (const p of replicated) (flat.set(p.grad, o), (o += p.size));
    await this.#sum(flat);
    o = 0;
    for (const p of replicated) (p.grad.set(flat.subarray(o, o + p.size)), (o += p.size));
  }

  /** Same contract as GPT.forwardBackward; every rank of the TP group calls it with the same tokens. */
  async forwardBackward(tokens: Int32Array, batch: number, opts: { gradScale: number; hooks?: ModelHooks }): Promise<number> {
    const loss = await unitsForwardBackward(this, tokens, batch, opts);
    await this.finishGrads();
    return loss;
  }

  /** Vocab-parallel lookup (one all-reduce, or reduce-scatter to this rank's rows) plus the replicated positions. */
  async embedForward(tokens: Int32Array, batch: number): Promise<Float32Array> {
    const { dim: D, seqLen: T } = this.cfg;
    const N = batch * T, Vl = this.cfg.vocab / this.#P, v0 = this.#r * Vl;
    const partial = new Float32Array(N * D);
    for (let n = 0; n < N; n++) {
      const t = tokenAt(tokens, T, n, 0) - v0;
      if (t < 0 || t >= Vl) continue;
      for (let d = 0; d < D; d++) partial[n * D + d] = this.#wte.data[t * D + d]!;
    }
    const x = await this.#reduceRows(partial);
    const rows = this.activationRows(batch), first = this.sequenceParallel ? this.#r * rows : 0;
    for (let i = 0; i < rows; i++) {
      const po = ((first + i) % T) * D;
      for (let d = 0; d < D; d++) x[i * D + d] = x[i * D + d]! + this.#wpe.data[po + d]!;
    }
    return x;
  }

  async embedBackward(tokens: Int32Array, batch: number, dx: Float32Array): Promise<void> {
    const { dim: D, seqLen: T } = this.cfg;
    const Vl = this.cfg.vocab / this.#P, v0 = this.#r * Vl;
    const rows = this.activationRows(batch), first = this.sequenceParallel ? this.#r * rows : 0;
    for (let i = 0; i < rows; i++) {
      const po = ((first + i) % T) * D;
      for (let d = 0; d < D; d++) this.#wpe.grad[po + d] = this.#wpe.grad[po + d]! + dx[i * D + d]!;
    }
    const all = await this.#allRows(dx);
    for (let n = 0; n < batch * T; n++) {
      const t = tokenAt(tokens, T, n, 0) - v0;
      if (t < 0 || t >= Vl) continue;
      for (let d = 0; d < D; d++) this.#wte.grad[t * D + d] = this.#wte.grad[t * D + d]! + all[n * D + d]!;
    }
  }

  /**
   * Block l: two all-reduces (after the row-parallel proj and fc2). Under sequence
   * parallelism x holds this rank's rows: the norms run on them, an all-gather
   * feeds each column-parallel layer and a reduce-scatter replaces each all-reduce.
   */
  async blockForward(l: number, x: Float32Array, batch: number): Promise<TPBlockSaved> {
    const { dim: D, hidden: H, seqLen: T, heads } = this.cfg;
    const P = this.#P, Dl = D / P, Hl = H / P, N = batch * T, rows = this.activationRows(batch);
    const b = this.#blocks[l]!;
    const aRows = new Float32Array(rows * D);
    const n1 = layerNorm(x, b.ln1g.data, b.ln1b.data, aRows, rows, D);
    const a = await this.#allRows(aRows);
    const qkv = new Float32Array(N * 3 * Dl);
    linear(a, b.qkvW.data, b.qkvB.data, qkv, N, D, 3 * Dl);
    const att = new Float32Array(N * Dl);
    const probs = attention(qkv, att, { batch, T, D: Dl, heads: heads / P });
    const proj = new Float32Array(N * D);
    linear(att, b.projW.data, null, proj, N, Dl, D);
    const x1 = await this.#reduceRows(proj);
    for (let i = 0; i < x1.length; i++) x1[i] = x1[i]! + b.projB.data[i % D]! + x[i]!;
    const cRows = new Float32Array(rows * D);
    const n2 = layerNorm(x1, b.ln2g.data, b.ln2b.data, cRows, rows, D);
    const c = await this.#allRows(cRows);
    const f = new Float32Array(N * Hl);
    linear(c, b.fc1W.data, b.fc1B.data, f, N, D, Hl);
    const m = new Float32Array(N * Hl);
    gelu(f, m);
    const fc2 = new Float32Array(N * D);
    linear(m, b.fc2W.data, null, fc2, N, Hl, D);
    const out = await this.#reduceRows(fc2);
    for (let i = 0; i < out.length; i++) out[i] = out[i]! + b.fc2B.data[i % D]! + x1[i]!;
    return { n1, a, qkv, probs, att, n2, c, f, m, out };
  }

  /** Block l's backward: two all-reduces (the column-parallel layers' input gradients). dOut is consumed; `later` as GPT's. */
  async blockBackward(l: number, s: TPBlockSaved, dOut: Float32Array, batch: number, later?: DeferredWeightGrads): Promise<Float32Array> {
    const { dim: D, hidden: H, seqLen: T, heads } = this.cfg;
    const P = this.#P, Dl = D / P, Hl = H / P, N = batch * T, rows = this.activationRows(batch);
    const b = this.#blocks[l]!;
    colSum(dOut, b.fc2B.grad, rows, D);
    const dm = new Float32Array(N * Hl);
    linearBackwardSplit(later, s.m, b.fc2W.data, await this.#allRows(dOut), dm, b.fc2W.grad, null, N, Hl, D);
    geluBackward(s.f, dm);
    const dcAll = new Float32Array(N * D);
    linearBackwardSplit(later, s.c, b.fc1W.data, dm, dcAll, b.fc1W.grad, b.fc1B.grad, N, D, Hl);
    const dc = await this.#reduceRows(dcAll);
    const dx1 = dOut;
    layerNormBackward(dc, s.n2, b.ln2g.data, dx1, b.ln2g.grad, b.ln2b.grad, rows, D);
    colSum(dx1, b.projB.grad, rows, D);
    const datt = new Float32Array(N * Dl);
    linearBackwardSplit(later, s.att, b.projW.data, await this.#allRows(dx1), datt, b.projW.grad, null, N, Dl, D);
    const dqkv = new Float32Array(N * 3 * Dl);
    attentionBackward(s.qkv, s.probs, datt, dqkv, { batch, T, D: Dl, heads: heads / P });
    const daAll = new Float32Array(N * D);
    linearBackwardSplit(later, s.a, b.qkvW.data, dqkv, daAll, b.qkvW.grad, b.qkvB.grad, N, D, 3 * Dl);
    const da = await this.#reduceRows(daAll);
    layerNormBackward(da, s.n1, b.ln1g.data, dx1, b.ln1g.grad, b.ln1b.grad, rows, D);
    return dx1;
  }

  /** Final norm, vocab-parallel head and cross-entropy (three per-row all-reduces), and their backward. */
  async headForwardBackward(x: Float32Array, tokens: Int32Array, batch: number, gradScale: number): Promise<{ loss: number; dx: Float32Array }> {
    const { dim: D, vocab: V, seqLen: T } = this.cfg;
    const P = this.#P, Vl = V / P, v0 = this.#r * Vl, N = batch * T, rows = this.activationRows(batch);
    const lfRows = new Float32Array(rows * D);
    const nf = layerNorm(x, this.#lnfG.data, this.#lnfB.data, lfRows, rows, D);
    const lf = await this.#allRows(lfRows);
    const logits = new Float32Array(N * Vl);
    linear(lf, this.#wOut.data, null, logits, N, D, Vl);
    const max = new Float32Array(N).fill(-Infinity);
    for (let n = 0; n < N; n++) for (let v = 0; v < Vl; v++) max[n] = Math.max(max[n]!, logits[n * Vl + v]!);
    if (P > 1) await this.tp.allReduce(max, { op: 'max' });
    const sumTarget = new Float32Array(2 * N);
    for (let n = 0; n < N; n++) {
      let s = 0;
      for (let v = 0; v < Vl; v++) s += Math.exp(logits[n * Vl + v]! - max[n]!);
      sumTarget[n] = s;
      const t = tokenAt(tokens, T, n, 1) - v0;
      if (t >= 0 && t < Vl) sumTarget[N + n] = logits[n * Vl + t]!;
    }
    await this.#sum(sumTarget);
    let loss = 0;
    for (let n = 0; n < N; n++) {
      const sum = sumTarget[n]!;
      loss += Math.log(sum) + max[n]! - sumTarget[N + n]!;
      for (let v = 0; v < Vl; v++) logits[n * Vl + v] = (Math.exp(logits[n * Vl + v]! - max[n]!) / sum) * gradScale;
      const t = tokenAt(tokens, T, n, 1) - v0;
      if (t >= 0 && t < Vl) logits[n * Vl + t] = logits[n * Vl + t]! - gradScale;
    }
    const dlfAll = new Float32Array(N * D);
    linearBackward(lf, this.#wOut.data, logits, dlfAll, this.#wOut.grad, null, N, D, Vl);
    const dlf = await this.#reduceRows(dlfAll);
    const dx = new Float32Array(rows * D);
    layerNormBackward(dlf, nf, this.#lnfG.data, dx, this.#lnfG.grad, this.#lnfB.grad, rows, D);
    return { loss, dx };
  }
}

function colSum(dy: Float32Array, db: Float32Array, n: number, D: number): void {
  for (let r = 0; r < n; r++) for (let d = 0; d < D; d++) db[d] = db[d]! + dy[r * D + d]!;
}
