/**
 * TinyLM: a small causal language model written directly against Float32Array,
 * forward and backward by hand, deterministic from a seed.
 *
 *   embed:   h = tok[x] + pos[t]
 *   block l: c = causal prefix mean of h (the only token mixing: cheap, causal)
 *            u = h + mix ⊙ c
 *            h' = u + tanh(u·W1 + b1)·W2 + b2
 *   head:    logits = h·Wout + bout, softmax cross-entropy on the next token
 *
 * Units (FSDP's wrapping granularity) are embed, each block, and head; the
 * model calls the runtime's hooks at unit boundaries and per finished gradient.
 */
import type { ModelHooks, ParamLike } from '../../runtime/index.js';
import { NcclNodeError } from '../../errors.js';
import { linear, linearBackward, rng } from './kernels.js';

export interface TinyLMConfig {
  vocab: number;
  dim: number;
  hidden: number;
  layers: number;
  seqLen: number;
  seed: number;
}

/** ~3.3M parameters, 26 tensors: the benchmark / example default. */
export const DEFAULT_CONFIG: TinyLMConfig = { vocab: 509, dim: 256, hidden: 1021, layers: 6, seqLen: 32, seed: 1234 };
/** ~1.3M parameters with sizes divisible by nothing in particular: the tests' model. */
export const TEST_CONFIG: TinyLMConfig = { vocab: 257, dim: 190, hidden: 767, layers: 4, seqLen: 12, seed: 7 };

export class Param implements ParamLike {
  readonly size: number;
  data: Float32Array;
  grad: Float32Array;
  constructor(readonly name: string, readonly shape: number[], init: (i: number) => number) {
    this.size = shape.reduce((a, b) => a * b, 1);
    this.data = Float32Array.from({ length: this.size }, (_, i) => init(i));
    this.grad = new Float32Array(this.size);
  }
}

interface BlockParams { mix: Param; w1: Param; b1: Param; w2: Param; b2: Param }
interface Saved { h: Float32Array; c: Float32Array; u: Float32Array; z: Float32Array }

export class TinyLM {
  readonly params: Param[] = [];
  /** Parameters grouped by unit, in forward order. */
  readonly units: Param[][] = [];
  readonly tok: Param;
  readonly pos: Param;
  readonly blocks: BlockParams[] = [];
  readonly wOut: Param;
  readonly bOut: Param;

  constructor(readonly cfg: TinyLMConfig) {
    const r = rng(cfg.seed);
    const uniform = (scale: number) => () => (r() * 2 - 1) * scale;
    const zero = () => 0;
    const { vocab: V, dim: D, hidden: H, seqLen: T } = cfg;
    this.tok = this.#add(0, new Param('embed.tok', [V, D], uniform(0.5)));
    this.pos = this.#add(0, new Param('embed.pos', [T, D], uniform(0.1)));
    for (let l = 0; l < cfg.layers; l++) {
      const u = l + 1;
      this.blocks.push({
        mix: this.#add(u, new Param(`block${l}.mix`, [D], () => 0.5)),
        w1: this.#add(u, new Param(`block${l}.w1`, [D, H], uniform(Math.sqrt(3 / D)))),
        b1: this.#add(u, new Param(`block${l}.b1`, [H], zero)),
        w2: this.#add(u, new Param(`block${l}.w2`, [H, D], uniform(Math.sqrt(3 / H) / Math.sqrt(2 * cfg.layers)))),
        b2: this.#add(u, new Param(`block${l}.b2`, [D], zero)),
      });
    }
    const head = cfg.layers + 1;
    // Small output init: logits start near 0, so the loss starts near ln(vocab).
    this.wOut = this.#add(head, new Param('head.w', [D, V], uniform(0.1 * Math.sqrt(3 / D))));
    this.bOut = this.#add(head, new Param('head.b', [V], zero));
  }

  #add(unit: number, p: Param): Param {
    (this.units[unit] ??= []).push(p);
    this.params.push(p);
    return p;
  }

  get numParams(): number {
    return this.params.reduce((a, p) => a + p.size, 0);
  }

  /**
   * Forward and backward on `batch` sequences of seqLen+1 tokens (inputs and
   * shifted targets). Gradients of the summed token loss times `gradScale` are
   * accumulated into each param.grad. Returns the mean token loss.
   */
  async forwardBackward(tokens: Int32Array, batch: number, opts: { gradScale: number; hooks?: ModelHooks }): Promise<number> {
    const { dim: D, hidden: H, vocab: V, seqLen: T, layers: L } = this.cfg;
    const hk = opts.hooks ?? {};
    const N = batch * T;
    const x = (n: number) => tokens[Math.floor(n / T) * (T + 1) + (n % T)]!;
    const y = (n: number) => tokens[Math.floor(n / T) * (T + 1) + (n % T) + 1]!;

    // ---- forward ----
    await hk.beforeForward?.(0);
    let h: Float32Array = new Float32Array(N * D);
    for (let n = 0; n < N; n++) {
      const tok = this.tok.data, pos = this.pos.data;
      const to = x(n) * D, po = (n % T) * D, ho = n * D;
      for (let d = 0; d < D; d++) h[ho + d] = tok[to + d]! + pos[po + d]!;
    }
    hk.afterForward?.(0);
    const saved: Saved[] = [];
    for (let l = 0; l < L; l++) {
      await hk.beforeForward?.(l + 1);
      const b = this.blocks[l]!;
      const c = prefixMean(h, batch, T, D);
      const u = new Float32Array(N * D);
      const mix = b.mix.data;
      for (let i = 0; i < N * D; i++) u[i] = h[i]! + mix[i % D]! * c[i]!;
      const z = new Float32Array(N * H);
      linear(u, b.w1.data, b.b1.data, z, N, D, H);
      for (let i = 0; i < z.length; i++) z[i] = Math.tanh(z[i]!);
      const out = new Float32Array(N * D);
      linear(z, b.w2.data, b.b2.data, out, N, H, D);
      for (let i = 0; i < out.length; i++) out[i] = out[i]! + u[i]!;
      saved.push({ h, c, u, z });
      h = out;
      hk.afterForward?.(l + 1);
    }
    await hk.beforeForward?.(L + 1);
    const logits = new Float32Array(N * V);
    linear(h, this.wOut.data, this.bOut.data, logits, N, D, V);
    hk.afterForward?.(L + 1);

    // ---- loss: softmax cross-entropy; logits become dloss/dlogits in place ----
    let loss = 0;
    for (let n = 0; n < N; n++) {
      const o = n * V;
      let max = -Infinity;
      for (let v = 0; v < V; v++) max = Math.max(max, logits[o + v]!);
      let sum = 0;
      for (let v = 0; v < V; v++) sum += Math.exp(logits[o + v]! - max);
      const target = y(n);
      loss += Math.log(sum) + max - logits[o + target]!;
      for (let v = 0; v < V; v++) logits[o + v] = (Math.exp(logits[o + v]! - max) / sum) * opts.gradScale;
      logits[o + target] = logits[o + target]! - (opts.gradScale);
    }

    // ---- backward, units in reverse ----
    await hk.beforeBackward?.(L + 1);
    let dh: Float32Array = new Float32Array(N * D);
    linearBackward(h, this.wOut.data, logits, dh, this.wOut.grad, this.bOut.grad, N, D, V);
    this.#ready(hk, this.bOut, this.wOut);
    hk.afterBackward?.(L + 1);
    for (let l = L - 1; l >= 0; l--) {
      await hk.beforeBackward?.(l + 1);
      const b = this.blocks[l]!;
      const s = saved[l]!;
      const dz = new Float32Array(N * H);
      linearBackward(s.z, b.w2.data, dh, dz, b.w2.grad, b.b2.grad, N, H, D);
      this.#ready(hk, b.b2, b.w2);
      for (let i = 0; i < dz.length; i++) dz[i] = dz[i]! * (1 - s.z[i]! * s.z[i]!);
      const du = new Float32Array(N * D);
      linearBackward(s.u, b.w1.data, dz, du, b.w1.grad, b.b1.grad, N, D, H);
      this.#ready(hk, b.b1, b.w1);
      for (let i = 0; i < du.length; i++) du[i] = du[i]! + dh[i]!;
      const mix = b.mix.data, dmix = b.mix.grad;
      const dc = new Float32Array(N * D);
      for (let i = 0; i < N * D; i++) {
        dmix[i % D] = dmix[i % D]! + du[i]! * s.c[i]!;
        dc[i] = mix[i % D]! * du[i]!;
      }
      this.#ready(hk, b.mix);
      dh = du;
      prefixMeanBackward(dc, dh, batch, T, D);
      hk.afterBackward?.(l + 1);
    }
    await hk.beforeBackward?.(0);
    const dtok = this.tok.grad, dpos = this.pos.grad;
    for (let n = 0; n < N; n++) {
      const to = x(n) * D, po = (n % T) * D, ho = n * D;
      for (let d = 0; d < D; d++) {
        dtok[to + d] = dtok[to + d]! + dh[ho + d]!;
        dpos[po + d] = dpos[po + d]! + dh[ho + d]!;
      }
    }
    this.#ready(hk, this.pos, this.tok);
    hk.afterBackward?.(0);
    return loss / N;
  }

  /**
   * Inference: next-token logits for one sequence of at most seqLen tokens, with no
   * gradients and no hooks (the parameters must be resident, as in one process).
   * `last` (default) returns only the final position's logits ([vocab]), which is
   * all greedy decoding needs and skips the head for the other positions; otherwise
   * every position's ([tokens.length, vocab], row t predicting token t + 1).
   */
  logits(tokens: ArrayLike<number>, o: { last?: boolean } = {}): Float32Array {
    const { dim: D, hidden: H, vocab: V, seqLen: T } = this.cfg;
    const n = tokens.length;
    if (n < 1 || n > T) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `TinyLM.logits: expected 1..${T} tokens, received ${n}`);
    let h = new Float32Array(n * D);
    for (let t = 0; t < n; t++) {
      const id = tokens[t]!;
      if (!(Number.isInteger(id) && id >= 0 && id < V)) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `TinyLM.logits: token ${t} is ${id}, expected an id in 0..${V - 1}`);
      const to = id * D, po = t * D, ho = t * D;
      for (let d = 0; d < D; d++) h[ho + d] = this.tok.data[to + d]! + this.pos.data[po + d]!;
    }
    const z = new Float32Array(n * H);
    for (const b of this.blocks) {
      // The same arithmetic as forwardBackward (float64 prefix sums, float32 tensors), so both give the same loss.
      const c = prefixMean(h, 1, n, D);
      const u = new Float32Array(n * D);
      const mix = b.mix.data;
      for (let i = 0; i < n * D; i++) u[i] = h[i]! + mix[i % D]! * c[i]!;
      linear(u, b.w1.data, b.b1.data, z, n, D, H);
      for (let i = 0; i < z.length; i++) z[i] = Math.tanh(z[i]!);
      const out = new Float32Array(n * D);
      linear(z, b.w2.data, b.b2.data, out, n, H, D);
      for (let i = 0; i < out.length; i++) out[i] = out[i]! + u[i]!;
      h = out;
    }
    const rows = o.last === false ? n : 1;
    const logits = new Float32Array(rows * V);
    linear(h.subarray((n - rows) * D), this.wOut.data, this.bOut.data, logits, rows, D, V);
    return logits;
  }

  #ready(hk: ModelHooks, ...ps: Param[]): void {
    if (hk.gradReady) for (const p of ps) hk.gradReady(p);
  }
}

/** c[t] = mean of h[0..t] within each sequence. */
function prefixMean(h: Float32Array, batch: number, T: number, D: number): Float32Array {
  const c = new Float32Array(h.length);
  const acc = new Float64Array(D);
  for (let b = 0; b < batch; b++) {
    acc.fill(0);
    for (let t = 0; t < T; t++) {
      const o = (b * T + t) * D;
      for (let d = 0; d < D; d++) {
        acc[d] = acc[d]! + h[o + d]!;
        c[o + d] = acc[d]! / (t + 1);
      }
    }
  }
  return c;
}

/** dh[s] = dh[s]! + Σ_{t ≥ s} dc[t] / (t+1): the transpose of prefixMean. */
function prefixMeanBackward(dc: Float32Array, dh: Float32Array, batch: number, T: number, D: number): void {
  const acc = new Float64Array(D);
  for (let b = 0; b < batch; b++) {
    acc.fill(0);
    for (let t = T - 1; t >= 0; t--) {
      const o = (b * T + t) * D;
      for (let d = 0; d < D; d++) {
        acc[d] = acc[d]! + dc[o + d]! / (t + 1);
        dh[o + d] = dh[o + d]! + acc[d]!;
      }
    }
  }
}
