/**
 * Deterministic, resumable batches from a prepared corpus.
 *
 * Sample k is the window of seqLen + 1 tokens starting at token k * seqLen (inputs
 * and next-token targets, as nanoGPT cuts them). Each epoch visits every sample once
 * in a seeded permutation that depends on the seed and the epoch only, never on the
 * world size (as MosaicML Streaming guarantees), so the global order is a fixed
 * sequence of sample ids. Step s's global batch is the next globalBatch ids of that
 * sequence; rank r of W takes the r-th of W equal slices. The state is one number,
 * the position in the sequence, with the seed and the fingerprints of the dataset
 * and of the sample layout: resumed at any data-parallel size, the loader continues
 * the same sequence, with no sample repeated or skipped. Batches are read ahead
 * (`prefetch`) with positional reads off the training thread.
 */
import { NcclNodeError } from '../errors.js';
import { mulberry32 } from '../util/prng.js';
import { TokenDataset, type TokenArray } from './dataset.js';

export interface LoaderOptions {
  /** Tokens per sample's input; each sample reads seqLen + 1 tokens. */
  seqLen: number;
  /** Samples per global step, over all data-parallel ranks. */
  globalBatch: number;
  rank: number;
  worldSize: number;
  seed?: number;
  /** Batches read ahead (default 2). */
  prefetch?: number;
}

/** What a checkpoint keeps of a loader (JSON). */
export interface LoaderState {
  version: 1;
  seed: number;
  /** Samples of the global sequence consumed so far (all ranks together). */
  position: number;
  /** TokenDataset.fingerprint of the corpus. */
  dataset: string;
  /** How samples are cut: a resume with another cut would mean other samples. */
  seqLen: number;
}

export interface Batch {
  /** Global step this batch belongs to (position / globalBatch at the time it was cut). */
  step: number;
  epoch: number;
  /** This rank's sample ids, in order. */
  sampleIds: number[];
  /** Row i is sample sampleIds[i]: seqLen + 1 tokens. */
  tokens: TokenArray;
}

/** mulberry32 over a 32-bit mix of (seed, epoch). */
function prng(seed: number, epoch: number): () => number {
  return mulberry32(Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(epoch + 1, 0xc2b2ae35));
}

/** The epoch's order of sample ids: a Fisher-Yates shuffle of [0, n). */
export function epochOrder(n: number, seed: number, epoch: number): Uint32Array {
  const order = new Uint32Array(n);
  for (let i = 0; i < n; i++) order[i] = i;
  const rand = prng(seed, epoch);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    const t = order[i]!;
    order[i] = order[j]!;
    order[j] = t;
  }
  return order;
}

function positiveInt(name: string, v: unknown): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `DataLoader: ${name} must be a positive integer, received ${String(v)}`);
  }
  return v;
}

export class DataLoader {
  readonly samplesPerEpoch: number;
  readonly seqLen: number;
  readonly globalBatch: number;
  readonly rank: number;
  readonly worldSize: number;
  #seed: number;
  #position = 0;
  #orders = new Map<number, Uint32Array>();
  #ahead: { position: number; batch: Promise<Batch> }[] = [];
  readonly #prefetch: number;

  private constructor(readonly dataset: TokenDataset, o: LoaderOptions) {
    this.seqLen = positiveInt('seqLen', o.seqLen);
    this.globalBatch = positiveInt('globalBatch', o.globalBatch);
    this.worldSize = positiveInt('worldSize', o.worldSize);
    if (!Number.isInteger(o.rank) || o.rank < 0 || o.rank >= o.worldSize) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `DataLoader: rank must be in [0, ${o.worldSize}), received ${o.rank}`);
    }
    this.rank = o.rank;
    if (this.globalBatch % this.worldSize !== 0) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `DataLoader: globalBatch ${this.globalBatch} must divide by the ${this.worldSize} data-parallel ranks`);
    }
    this.#seed = o.seed ?? 0;
    this.#prefetch = o.prefetch ?? 2;
    this.samplesPerEpoch = Math.floor((dataset.tokens - 1) / this.seqLen);
    if (this.samplesPerEpoch < this.globalBatch) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `DataLoader: ${dataset.dir} holds ${this.samplesPerEpoch} samples of ${this.seqLen + 1} tokens, fewer than one global batch (${this.globalBatch})`);
    }
  }

  static async create(dir: string | TokenDataset, o: LoaderOptions): Promise<DataLoader> {
    const ds = typeof dir === 'string' ? await TokenDataset.open(dir) : dir;
    return new DataLoader(ds, o);
  }

  /** The next global step's batch for this rank. */
  next(): Promise<Batch> {
    while (this.#ahead.length < 1 + this.#prefetch) {
      const last = this.#ahead[this.#ahead.length - 1];
      const position = last ? last.position + this.globalBatch : this.#position;
      const batch = this.#cut(position);
      batch.catch(() => undefined); // observed when taken
      this.#ahead.push({ position, batch });
    }
    const { batch } = this.#ahead.shift()!;
    this.#position += this.globalBatch;
    return batch;
  }

  /** Skips `steps` global steps (e.g. the batches around a loss spike) without reading them. */
  skip(steps: number): void {
    if (!Number.isInteger(steps) || steps < 0) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `DataLoader.skip: steps must be a non-negative integer, received ${steps}`);
    this.#position += steps * this.globalBatch;
    this.#ahead = [];
  }

  /** The global sample ids of global steps [from, to) at this global batch size, from the start. */
  globalIds(fromStep: number, toStep: number): number[] {
    const ids: number[] = [];
    for (let p = fromStep * this.globalBatch; p < toStep * this.globalBatch; p++) ids.push(this.#idAt(p));
    return ids;
  }

  state(): LoaderState {
    return { version: 1, seed: this.#seed, position: this.#position, dataset: this.dataset.fingerprint, seqLen: this.seqLen };
  }

  /** Continues from a saved state; refuses one taken on other data or another sample cut. */
  load(s: LoaderState): void {
    if (!s || s.version !== 1) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `DataLoader.load: not a loader state (version ${String(s?.version)})`);
    if (s.dataset !== this.dataset.fingerprint) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `DataLoader.load: the state was saved on dataset ${s.dataset.slice(0, 16)}..., this is ${this.dataset.fingerprint.slice(0, 16)}... (${this.dataset.dir}): resuming would read other samples`);
    }
    if (s.seqLen !== this.seqLen) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `DataLoader.load: the state cut samples of ${s.seqLen} tokens, this loader ${this.seqLen}`);
    }
    if (!Number.isInteger(s.position) || s.position < 0) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `DataLoader.load: bad position ${s.position}`);
    this.#seed = s.seed;
    this.#position = s.position;
    this.#orders.clear();
    this.#ahead = [];
  }

  async close(): Promise<void> {
    this.#ahead = [];
    await this.dataset.close();
  }

  #idAt(position: number): number {
    const epoch = Math.floor(position / this.samplesPerEpoch);
    let order = this.#orders.get(epoch);
    if (!order) {
      order = epochOrder(this.samplesPerEpoch, this.#seed, epoch);
      this.#orders.set(epoch, order);
      for (const e of this.#orders.keys()) if (e < epoch - 1) this.#orders.delete(e);
    }
    return order[position % this.samplesPerEpoch]!;
  }

  async #cut(position: number): Promise<Batch> {
    const per = this.globalBatch / this.worldSize;
    const first = position + this.rank * per;
    const ids = Array.from({ length: per }, (_, i) => this.#idAt(first + i));
    const row = this.seqLen + 1;
    const rows = await Promise.all(ids.map((id) => this.dataset.read(id * this.seqLen, row)));
    const tokens = this.dataset.index.dtype === 'uint16' ? new Uint16Array(per * row) : new Uint32Array(per * row);
    rows.forEach((r, i) => tokens.set(r, i * row));
    return { step: Math.floor(position / this.globalBatch), epoch: Math.floor(first / this.samplesPerEpoch), sampleIds: ids, tokens };
  }
}
