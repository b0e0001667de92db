/**
 * A GPT pipeline stage (a plain GPT, or a tensor-parallel one for TP x PP): stage s of P holds a contiguous run of the blocks (the
 * first stage also the embeddings, the last the final norm and head), and runs
 * them per micro-batch as the runtime's schedule asks (src/runtime/pipeline.ts).
 * The last stage computes the loss and its gradient in the forward, so its
 * backward starts from there; each micro-batch's saved activations are dropped
 * as soon as its backward ran. With `recompute`, a micro-batch keeps only each
 * block's input and the backward runs the block's forward again first (activation
 * recomputation: memory for compute; a tensor-parallel block repeats its forward
 * collectives, on every tp rank alike).
 */
import type { PipelineStageModule } from '../../runtime/pipeline.js';
import type { Param } from '../tiny-lm/tiny-lm.js';
import type { DeferredWeightGrads } from '../tiny-lm/kernels.js';
import type { GPTUnits } from './gpt.js';

/** Blocks [first, end) of stage s: the L blocks split as evenly as possible, earlier stages taking the extra. */
export function stageBlocks(layers: number, stages: number, stage: number): [number, number] {
  const base = Math.floor(layers / stages), extra = layers % stages;
  const first = stage * base + Math.min(stage, extra);
  return [first, first + base + (stage < extra ? 1 : 0)];
}

/** The units (0 the embeddings, l + 1 block l, layers + 1 the head) stage s of `stages` runs, over its `chunks` chunks. */
export function stageUnits(layers: number, stages: number, stage: number, chunks = 1): Set<number> {
  const units = new Set<number>();
  for (let c = 0; c < chunks; c++) {
    const [a, b] = stageBlocks(layers, stages * chunks, c * stages + stage);
    for (let l = a; l < b; l++) units.add(l + 1);
  }
  if (stage === 0) units.add(0);
  if (stage === stages - 1) units.add(layers + 1);
  return units;
}

export class GPTPipelineStage<S extends { out: Float32Array }> implements PipelineStageModule {
  readonly boundarySize: number;
  /** This rank's parameters (all its chunks): what its optimizer steps and its gradient norm covers. */
  readonly params: Param[];
  /** Summed token loss per micro-batch (the rank holding the last virtual stage only). */
  readonly losses: number[] = [];
  /** Blocks [first, end) of each chunk. */
  readonly #blocks: Array<[number, number]>;
  readonly #saved = new Map<string, Array<S | Float32Array>>();
  readonly #dHead = new Map<number, Float32Array>();
  /** Weight gradients a split backward left for its W pass, by micro-batch/chunk. */
  readonly #weights = new Map<string, Array<() => void>>();

  /**
   * micro[m] holds micro-batch m: `batch` rows of seqLen+1 tokens; gradScale
   * multiplies the summed token loss (1 / tokens of the whole step, for a mean).
   * With chunks v > 1 (interleaved schedules) the rank holds virtual stages
   * c·stages + stage for c < v, the blocks split over stages·v of them.
   */
  constructor(readonly model: GPTUnits<S>, readonly stage: number, readonly stages: number,
    readonly micro: readonly Int32Array[], readonly batch: number, readonly gradScale: number, readonly chunks = 1,
    readonly recompute = false) {
    const { layers: L, seqLen: T, dim: D } = model.cfg;
    const virtual = stages * chunks;
    if (virtual > L) throw new RangeError(`a ${L}-layer GPT cannot fill ${virtual} pipeline stages`);
    this.#blocks = Array.from({ length: chunks }, (_, c) => stageBlocks(L, virtual, c * stages + stage));
    this.boundarySize = (model.activationRows?.(batch) ?? batch * T) * D;
    this.params = [
      ...(this.#first(0) ? model.units[0]! : []),
      ...this.#blocks.flatMap(([a, b]) => model.units.slice(a + 1, b + 1).flat()),
      ...(this.#last(chunks - 1) ? model.units[L + 1]! : []),
    ];
  }

  #first(chunk: number): boolean {
    return chunk === 0 && this.stage === 0;
  }

  #last(chunk: number): boolean {
    return chunk === this.chunks - 1 && this.stage === this.stages - 1;
  }

  async forward(m: number, input: Float32Array | null, chunk = 0): Promise<Float32Array | null> {
    const tokens = this.micro[m]!;
    let x = this.#first(chunk) ? await this.model.embedForward(tokens, this.batch) : input!;
    const saved: Array<S | Float32Array> = [];
    const [a, b] = this.#blocks[chunk]!;
    for (let l = a; l < b; l++) {
      const s = await this.model.blockForward(l, x, this.batch);
      saved.push(this.recompute ? x : s);
      x = s.out;
    }
    this.#saved.set(`${m}/${chunk}`, saved);
    this.peakSavedElements = Math.max(this.peakSavedElements, this.savedElements);
    if (!this.#last(chunk)) return x;
    const { loss, dx } = await this.model.headForwardBackward(x, tokens, this.batch, this.gradScale);
    this.losses[m] = loss;
    this.#dHead.set(m, dx);
    return null;
  }

  /** With `deferWeights`, the blocks' weight gradients wait for weight(m, chunk) (zero-bubble schedules' W pass). */
  async backward(m: number, dOut: Float32Array | null, chunk = 0, options: { deferWeights?: boolean } = {}): Promise<Float32Array | null> {
    let dx = this.#last(chunk) ? this.#dHead.get(m)! : dOut!;
    if (this.#last(chunk)) this.#dHead.delete(m);
    const saved = this.#saved.get(`${m}/${chunk}`)!;
    this.#saved.delete(`${m}/${chunk}`);
    const [a, b] = this.#blocks[chunk]!;
    const later: DeferredWeightGrads = options.deferWeights ? [] : undefined;
    for (let l = b - 1; l >= a; l--) {
      const kept = saved[l - a]!;
      const s = kept instanceof Float32Array ? await this.model.blockForward(l, kept, this.batch) : kept;
      dx = await this.model.blockBackward(l, s, dx, this.batch, later);
    }
    if (later) this.#weights.set(`${m}/${chunk}`, later);
    if (!this.#first(chunk)) return dx;
    await this.model.embedBackward(this.micro[m]!, this.batch, dx);
    return null;
  }

  /** The W pass of micro-batch m's split backward through chunk c: its blocks' weight gradients. */
  weight(m: number, chunk = 0): void {
    const later = this.#weights.get(`${m}/${chunk}`);
    if (!later) throw new RangeError(`no deferred weight gradients for micro-batch ${m}, chunk ${chunk}`);
    this.#weights.delete(`${m}/${chunk}`);
    for (const f of later) f();
  }

  /** (micro-batch, chunk) activations held now (for memory accounting). */
  get inFlight(): number {
    return this.#saved.size;
  }

  /** The most savedElements held at once so far. */
  peakSavedElements = 0;

  /** Float32 elements of the activations held now for backward passes. */
  get savedElements(): number {
    let n = 0;
    for (const list of this.#saved.values()) {
      for (const s of list) n += floats(s);
    }
    return n;
  }
}

/** Float32 elements in an array or in an object's arrays (nested objects too: the norms' statistics). */
function floats(x: unknown): number {
  if (x instanceof Float32Array) return x.length;
  if (x === null || typeof x !== 'object' || ArrayBuffer.isView(x)) return 0;
  return Object.values(x).reduce((a: number, v) => a + floats(v), 0);
}
