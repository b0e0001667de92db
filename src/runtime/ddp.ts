/**
 * DDP-style gradient bucketing with overlap. Gradients live in flat float32
 * buckets (param.grad becomes a view, PyTorch's gradient_as_bucket_view), so a
 * bucket is all-reduced in place the moment its last gradient is marked ready,
 * while backward keeps computing on the JS thread. Buckets are launched strictly
 * in bucket order on every rank, whatever order gradients arrive in, because
 * ranks that issue collectives in different orders deadlock or mix buckets.
 */
import type { Communicator } from '../comm/communicator.js';
import type { Work } from '../comm/work.js';
import { fromHalf, toHalf } from './cast.js';
import { clipCoefficient, sumSquares, type Optimizer } from './optim.js';
import { ddpSchema, parse, type DDPOptions } from './options.js';
import { replicatedSlices, wholeTensors } from './state-dict.js';
import type { DataParallel, DataParallelState, FlatPiece, MemoryReport, ModelHooks, ParamLike } from './types.js';
import { BucketOrder } from './bucket-order.js';

/**
 * Bucket assignment: fill buckets in registration order, the first capped at
 * firstBytes (it holds the first-registered parameters, whose gradients are
 * ready last, so the tail after backward stays short), then reverse so bucket 0
 * holds the last-registered parameters, ready first. Returns parameter indices.
 */
export function assignBuckets(sizes: number[], firstBytes: number, capBytes: number, bytesPerElement = 4): number[][] {
  const buckets: number[][] = [];
  let cur: number[] = [];
  let curBytes = 0;
  for (let i = 0; i < sizes.length; i++) {
    const cap = buckets.length === 0 ? firstBytes : capBytes;
    const b = sizes[i]! * bytesPerElement;
    if (cur.length > 0 && curBytes + b > cap) {
      buckets.push(cur);
      cur = [];
      curBytes = 0;
    }
    cur.push(i);
    curBytes += b;
  }
  if (cur.length > 0) buckets.push(cur);
  return buckets.reverse();
}

interface Bucket {
  index: number;
  params: ParamLike[];
  flat: Float32Array;
  work: Promise<void> | null;
  /** performance.now() at launch and at completion (for the overlap benchmark). */
  launchedAt: number;
  doneAt: number;
}

export class DistributedDataParallel implements DataParallel {
  readonly buckets: Bucket[];
  readonly hooks: ModelHooks;
  readonly #o: ReturnType<typeof ddpSchema.parse>;
  readonly #order: BucketOrder<ParamLike, Bucket>;
  #sync = true;

  /** Use create(): it also makes every rank start from rank 0's parameters. */
  private constructor(readonly comm: Communicator, readonly params: ParamLike[], readonly optimizer: Optimizer, options: DDPOptions) {
    this.#o = parse(ddpSchema, options, 'DistributedDataParallel');
    const groups = assignBuckets(params.map((p) => p.size), this.#o.firstBucketBytes, this.#o.bucketBytes);
    this.buckets = groups.map((idx, index) => {
      const ps = idx.map((i) => params[i]!);
      const flat = new Float32Array(ps.reduce((a, p) => a + p.size, 0));
      let off = 0;
      for (const p of ps) {
        flat.set(p.grad.subarray(0, p.size), off);
        p.grad = flat.subarray(off, off + p.size);
        off += p.size;
      }
      const b: Bucket = { index, params: ps, flat, work: null, launchedAt: 0, doneAt: 0 };
      return b;
    });
    this.#order = new BucketOrder('DistributedDataParallel', this.buckets, (b) => this.#launch(b));
    this.hooks = { gradReady: (p) => this.markReady(p) };
  }

  static async create(comm: Communicator, params: ParamLike[], optimizer: Optimizer, options: DDPOptions = {}): Promise<DistributedDataParallel> {
    const ddp = new DistributedDataParallel(comm, params, optimizer, options);
    if (ddp.#o.broadcastParams && comm.size > 1) await Promise.all(params.map((p) => comm.broadcast(p.data, { root: 0 })));
    return ddp;
  }

  setRequiresGradSync(sync: boolean): void {
    this.#sync = sync;
  }

  zeroGrad(): void {
    for (const b of this.buckets) b.flat.fill(0);
  }

  /** Backward produced `p`'s final gradient: launches every bucket that is now complete, in order. */
  markReady(p: ParamLike): void {
    if (this.#sync) this.#order.markReady(p);
  }

  #launch(b: Bucket): void {
    const { comm } = this;
    const mean = this.#o.reduce === 'mean';
    b.launchedAt = performance.now();
    let done: Promise<void>;
    if (this.#o.compression === 'none') {
      done = comm.allReduce(b.flat, { op: mean ? 'avg' : 'sum' }).then(() => undefined);
    } else {
      // Divide before reducing (fp16_compress_hook's fix): a sum of N large gradients overflows fp16.
      const dtype = this.#o.compression;
      const half = new Uint16Array(b.flat.length);
      toHalf(b.flat, half, dtype, mean ? 1 / comm.size : 1);
      done = (comm.allReduce(half, { op: 'sum', dtype }) as Work).then(() => fromHalf(half, b.flat, dtype));
    }
    b.work = done.then(() => {
      b.doneAt = performance.now();
    });
  }

  async finish(): Promise<void> {
    if (!this.#sync) return;
    this.#order.assertComplete(this.params);
    await Promise.all(this.buckets.map((b) => b.work));
    for (const b of this.buckets) b.work = null;
    this.#order.reset();
  }

  /** Gradients are identical on every rank after finish(), so the norm needs no communication. */
  async clipGradNorm(maxNorm: number): Promise<number> {
    const norm = Math.sqrt(sumSquares(this.buckets.map((b) => b.flat)));
    const c = clipCoefficient(norm, maxNorm);
    if (c < 1) for (const b of this.buckets) for (let i = 0; i < b.flat.length; i++) b.flat[i] = b.flat[i]! * (c);
    return norm;
  }

  async step(): Promise<void> {
    this.optimizer.step(this.params.map((p) => ({ key: p.name, param: p.data, grad: p.grad })));
  }

  /**
   * Parameters and optimizer state are replicated, so each rank saves only its
   * 1/world flat slice of every tensor: all ranks write in parallel, nothing twice.
   */
  stateDict(): DataParallelState {
    const tensors = replicatedSlices(this.params, (p) => p.data, this.optimizer, this.comm.rank, this.comm.size);
    return { tensors, optimizerStep: this.optimizer.state([]).step };
  }

  /** Every rank reads every tensor whole (from whichever ranks' slices hold it). */
  async loadStateDict(fill: (targets: Record<string, FlatPiece>) => Promise<{ optimizerStep: number }>): Promise<void> {
    const { optimizerStep } = await fill(wholeTensors(this.params, (p) => p.data, this.optimizer));
    this.optimizer.loadState({ step: optimizerStep });
  }

  memory(): MemoryReport {
    const n = this.buckets.reduce((a, b) => a + b.flat.length, 0);
    return { params: 4 * n, grads: 4 * n, optimizer: this.optimizer.stateBytes(), peakTransient: 0 };
  }

  /** Per-bucket launch/completion times of the last step, for overlap accounting. */
  timings(): { launchedAt: number; doneAt: number; bytes: number }[] {
    return this.buckets.map((b) => ({ launchedAt: b.launchedAt, doneAt: b.doneAt, bytes: b.flat.byteLength }));
  }
}
