/**
 * A GPT pipeline stage (a plain GPT, or a tensor-parallel one for TP x PP): stage s of P holds a contiguous run of the blocks (the
 * first stage also the embeddings, the last the final norm and head), and runs
 * them per micro-batch as the runtime's schedule asks (src/runtime/pipeline.ts).
 * The last stage computes the loss and its gradient in the forward, so its
 * backward starts from there; each micro-batch's saved activations are dropped
 * as soon as its backward ran.
 */
import type { PipelineStageModule } from '../../runtime/pipeline.js';
import type { Param } from '../tiny-lm/tiny-lm.js';
import type { GPTConfig } from './gpt.js';

type Maybe<T> = T | Promise<T>;

/** GPT's unit steps, as GPT and TensorParallelGPT both provide them (the latter with collectives inside). */
export interface GPTUnits<S extends { out: Float32Array } = { out: Float32Array }> {
  readonly cfg: GPTConfig;
  readonly units: Param[][];
  embedForward(tokens: Int32Array, batch: number): Maybe<Float32Array>;
  embedBackward(tokens: Int32Array, batch: number, dx: Float32Array): void;
  blockForward(l: number, x: Float32Array, batch: number): Maybe<S>;
  blockBackward(l: number, saved: S, dOut: Float32Array, batch: number): Maybe<Float32Array>;
  headForwardBackward(x: Float32Array, tokens: Int32Array, batch: number, gradScale: number): Maybe<{ loss: number; dx: Float32Array }>;
}

/** Blocks [first, end) of stage s: the L blocks split as evenly as possible, earlier stages taking the extra. */
export function stageBlocks(layers: number, stages: number, stage: number): [number, number] {
  const base = Math.floor(layers / stages), extra = layers % stages;
  const first = stage * base + Math.min(stage, extra);
  return [first, first + base + (stage < extra ? 1 : 0)];
}

export class GPTPipelineStage<S extends { out: Float32Array }> implements PipelineStageModule {
  readonly boundarySize: number;
  /** This stage's parameters: what its optimizer steps and its gradient norm covers. */
  readonly params: Param[];
  /** Summed token loss per micro-batch (last stage only). */
  readonly losses: number[] = [];
  readonly #blocks: [number, number];
  readonly #saved = new Map<number, S[]>();
  readonly #dHead = new Map<number, Float32Array>();

  /**
   * micro[m] holds micro-batch m: `batch` rows of seqLen+1 tokens; gradScale
   * multiplies the summed token loss (1 / tokens of the whole step, for a mean).
   */
  constructor(readonly model: GPTUnits<S>, readonly stage: number, readonly stages: number,
    readonly micro: readonly Int32Array[], readonly batch: number, readonly gradScale: number) {
    const { layers: L, seqLen: T, dim: D } = model.cfg;
    if (stages > L) throw new RangeError(`a ${L}-layer GPT cannot fill ${stages} pipeline stages`);
    this.#blocks = stageBlocks(L, stages, stage);
    this.boundarySize = batch * T * D;
    const [a, b] = this.#blocks;
    this.params = [...(this.#first ? model.units[0]! : []), ...model.units.slice(a + 1, b + 1).flat(), ...(this.#last ? model.units[L + 1]! : [])];
  }

  get #first(): boolean {
    return this.stage === 0;
  }

  get #last(): boolean {
    return this.stage === this.stages - 1;
  }

  async forward(m: number, input: Float32Array | null): Promise<Float32Array | null> {
    const tokens = this.micro[m]!;
    let x = this.#first ? await this.model.embedForward(tokens, this.batch) : input!;
    const saved: S[] = [];
    for (let l = this.#blocks[0]; l < this.#blocks[1]; l++) {
      const s = await this.model.blockForward(l, x, this.batch);
      saved.push(s);
      x = s.out;
    }
    this.#saved.set(m, saved);
    if (!this.#last) return x;
    const { loss, dx } = await this.model.headForwardBackward(x, tokens, this.batch, this.gradScale);
    this.losses[m] = loss;
    this.#dHead.set(m, dx);
    return null;
  }

  async backward(m: number, dOut: Float32Array | null): Promise<Float32Array | null> {
    let dx = this.#last ? this.#dHead.get(m)! : dOut!;
    this.#dHead.delete(m);
    const saved = this.#saved.get(m)!;
    this.#saved.delete(m);
    for (let l = this.#blocks[1] - 1; l >= this.#blocks[0]; l--) dx = await this.model.blockBackward(l, saved[l - this.#blocks[0]]!, dx, this.batch);
    if (!this.#first) return dx;
    this.model.embedBackward(this.micro[m]!, this.batch, dx);
    return null;
  }

  /** Micro-batches whose activations are held now (for memory accounting). */
  get inFlight(): number {
    return this.#saved.size;
  }
}
