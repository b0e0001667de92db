/**
 * DDP-style gradient bucketing with overlap, on either storage (storage.ts): host
 * typed arrays over a CPU communicator, or DeviceBuffers over NCCL. Gradients live
 * in flat float32 buckets (param.grad becomes a view, PyTorch's
 * gradient_as_bucket_view), so a bucket is all-reduced in place the moment its last
 * gradient is marked ready, while backward keeps computing on the JS thread.
 * Buckets are launched strictly in bucket order on every rank, whatever order
 * gradients arrive in, because ranks that issue collectives in different orders
 * deadlock or mix buckets. Clipping and the optimizer step run in the storage (on
 * the device: kernels, with optimizer state in DeviceBuffers).
 */
import type { Communicator } from '../comm/communicator.js';
import type { DeviceBuffer } from '../gpu/device-buffer.js';
import { NcclNodeError } from '../errors.js';
import { BucketOrder } from './bucket-order.js';
import { deviceStorage, type DeviceParam } from './device-storage.js';
import { clipCoefficient, type Optimizer } from './optim.js';
import { ddpSchema, parse, type DDPOptions } from './runtime-options.js';
import { replicatedSlices, wholeTensors } from './state-dict.js';
import { hostStorage, SubmitQueue, type RuntimeParam, type SlotOptimizer, type Sized, type Storage } from './storage.js';
import type { DataParallel, DataParallelState, DevicePieceData, FlatPiece, MemoryReport, ModelHooks, ParamLike } from './types.js';

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

export interface Bucket<B, P> {
  index: number;
  params: P[];
  flat: B;
  work: Promise<void> | null;
  /** performance.now() at launch and at completion (for the overlap benchmark). */
  launchedAt: number;
  doneAt: number;
}

/** A parameter's bound storage; the runtime unbinds only FSDP's sharded units, never DDP's. */
function bound<B, U extends B | null>(p: RuntimeParam<B, U>, what: 'data' | 'grad'): B {
  const b = p[what];
  if (b === null) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${p.name}.${what} is not bound to a DeviceBuffer`);
  return b as B;
}

/** DDP on one storage; construct it with DistributedDataParallel.create or DeviceDistributedDataParallel.create. */
export class DataParallelOn<B extends DeviceBuffer | Float32Array, R extends Sized, U extends B | null> implements DataParallel<RuntimeParam<B, U>, B> {
  readonly hooks: ModelHooks<RuntimeParam<B, U>>;
  readonly #s: Storage<B, R, U>;
  readonly #o: ReturnType<typeof ddpSchema.parse>;
  readonly #order: BucketOrder<RuntimeParam<B, U>, Bucket<B, RuntimeParam<B, U>>>;
  readonly #queue = new SubmitQueue();
  readonly #opt: SlotOptimizer<B>;
  #sync = true;
  /** zeroGrad's fills; forward waits for them (zeroGrad itself is synchronous). */
  #zeroing: Promise<unknown> = Promise.resolve();
  /** Bytes of 16-bit reduction copies alive now, and the most at once. */
  #transient = 0;
  #peak = 0;

  protected constructor(readonly comm: Communicator, readonly params: RuntimeParam<B, U>[], readonly optimizer: Optimizer,
    readonly buckets: Bucket<B, RuntimeParam<B, U>>[], parts: { storage: Storage<B, R, U>; o: ReturnType<typeof ddpSchema.parse>; opt: SlotOptimizer<B>; name: string }) {
    this.#s = parts.storage;
    this.#o = parts.o;
    this.#opt = parts.opt;
    this.#order = new BucketOrder(parts.name, buckets, (b) => this.#launch(b));
    this.hooks = {
      beforeForward: (u) => (u === 0 ? this.#zeroing.then(() => undefined) : undefined),
      gradReady: (p) => this.markReady(p),
    };
  }

  /**
   * Buckets as assignBuckets lays them out, each parameter's gradient copied into its
   * bucket and rebound to a view of it; rank 0's parameters broadcast; optimizer state made.
   */
  protected static async build<B extends DeviceBuffer | Float32Array, R extends Sized, U extends B | null>(storage: Storage<B, R, U>, name: string,
    comm: Communicator, params: RuntimeParam<B, U>[], optimizer: Optimizer, options: DDPOptions) {
    const o = parse(ddpSchema, options, name);
    const groups = assignBuckets(params.map((p) => p.size), o.firstBucketBytes, o.bucketBytes);
    const buckets = await Promise.all(groups.map(async (idx, index): Promise<Bucket<B, RuntimeParam<B, U>>> => {
      const ps = idx.map((i) => params[i]!);
      const flat = await storage.zeros(ps.reduce((a, p) => a + p.size, 0));
      let off = 0;
      for (const p of ps) {
        const view = storage.view(flat, off, p.size);
        if (p.grad !== null && p.grad.length > 0) await storage.copy(view, p.grad);
        p.grad = view;
        off += p.size;
      }
      return { index, params: ps, flat, work: null, launchedAt: 0, doneAt: 0 };
    }));
    if (o.broadcastParams && comm.size > 1) await Promise.all(params.map((p) => storage.broadcast(comm, bound(p, 'data'))));
    const opt = await storage.optimizer(optimizer, params.map((p) => ({ key: p.name, size: p.size })));
    return [comm, params, optimizer, buckets, { storage, o, opt: opt as SlotOptimizer<B>, name }] as const;
  }

  setRequiresGradSync(sync: boolean): void {
    this.#sync = sync;
  }

  zeroGrad(): void {
    this.#zeroing = Promise.all(this.buckets.map((b) => this.#s.zero(b.flat)));
  }

  /** Backward produced `p`'s final gradient: launches every bucket that is now complete, in order. */
  markReady(p: RuntimeParam<B, U>): void {
    if (this.#sync) this.#order.markReady(p);
  }

  #launch(b: Bucket<B, RuntimeParam<B, U>>): void {
    const { comm } = this;
    const s = this.#s;
    const flat = b.flat;
    const mean = this.#o.reduce === 'mean';
    b.launchedAt = performance.now();
    let work: Promise<void>;
    if (this.#o.compression === 'none') {
      work = this.#queue.run(async () => ({ done: s.allReduce(comm, flat, { op: mean ? 'avg' : 'sum', dtype: 'float32' }) }));
    } else {
      // 16 bits: each rank's value is divided by N before the sum (fp16_compress_hook's
      // order; a sum of N large fp16 gradients overflows), then cast back to float32.
      const dtype = this.#o.compression;
      let half: B | R | null = null;
      work = this.#queue.run(async () => {
        const c = await s.compress(flat, dtype, mean ? 1 / comm.size : null);
        half = c.buf;
        this.#grow(half.byteLength);
        return { done: s.allReduce(comm, half, { op: 'sum', dtype, premul: c.premul }) };
      }).then(() => s.cast(half!, flat, dtype)).finally(() => {
        if (half) this.#grow(-half.byteLength);
        s.free(half);
      });
    }
    b.work = work.then(() => {
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
    const flats = this.buckets.map((b) => b.flat);
    const norm = Math.sqrt(await this.#s.sumSquares(flats));
    const c = clipCoefficient(norm, maxNorm);
    if (c < 1) await this.#s.scaleBy(flats, c);
    return norm;
  }

  /** The optimizer step on every parameter in place. */
  async step(): Promise<void> {
    await this.#opt.step(this.params.map((p) => ({ key: p.name, param: bound(p, 'data'), grad: bound(p, 'grad') })));
  }

  /**
   * Parameters and optimizer state are replicated, so each rank saves only its
   * 1/world flat slice of every tensor: all ranks write in parallel, nothing twice.
   * Pieces are views of the live buffers: call after step() resolved.
   */
  stateDict(): DataParallelState<B> {
    const tensors = replicatedSlices(this.params, (p) => bound(p, 'data'), this.#opt, this.comm.rank, this.comm.size);
    return { tensors, optimizerStep: this.#opt.state([]).step };
  }

  /** Every rank reads every tensor whole (from whichever ranks' slices hold it), so replicas agree without a broadcast. */
  async loadStateDict(fill: (targets: Record<string, FlatPiece<B>>) => Promise<{ optimizerStep: number }>): Promise<void> {
    const { optimizerStep } = await fill(wholeTensors(this.params, (p) => bound(p, 'data'), this.#opt));
    this.#opt.loadState({ step: optimizerStep });
  }

  memory(): MemoryReport {
    const n = this.buckets.reduce((a, b) => a + b.flat.length, 0);
    return { params: 4 * n, grads: 4 * n, optimizer: this.#opt.stateBytes(), peakTransient: this.#peak };
  }

  /** Per-bucket launch/completion times of the last step, for overlap accounting. */
  timings(): { launchedAt: number; doneAt: number; bytes: number }[] {
    return this.buckets.map((b) => ({ launchedAt: b.launchedAt, doneAt: b.doneAt, bytes: b.flat.byteLength }));
  }

  /** Frees the buckets and optimizer state (parameters belong to the caller). */
  dispose(): void {
    for (const b of this.buckets) this.#s.free(b.flat);
    this.#opt.dispose();
  }

  #grow(bytes: number): void {
    this.#transient += bytes;
    this.#peak = Math.max(this.#peak, this.#transient);
  }
}

/** DDP on host arrays over a CPU communicator. */
export class DistributedDataParallel extends DataParallelOn<Float32Array, Float32Array | Uint16Array | Float64Array, Float32Array> {
  /** Also makes every rank start from rank 0's parameters (broadcastParams). */
  static async create(comm: Communicator, params: ParamLike[], optimizer: Optimizer, options: DDPOptions = {}): Promise<DistributedDataParallel> {
    return new DistributedDataParallel(...await DataParallelOn.build(hostStorage, 'DistributedDataParallel', comm, params, optimizer, options));
  }
}

/**
 * DataParallel on DeviceParams: parameter and optimizer-state pieces are DeviceBuffer
 * views; a DeviceParam may carry `shape` for the global shape recorded in checkpoints.
 */
export type DeviceDataParallel = DataParallel<DeviceParam, DevicePieceData>;

/** DDP on DeviceBuffers over an NCCL communicator; `optimizer` gives the hyper-parameters, its state lives on the device. */
export class DeviceDistributedDataParallel extends DataParallelOn<DeviceBuffer, DeviceBuffer, null> {
  static async create(comm: Communicator, params: DeviceParam[], optimizer: Optimizer, options: DDPOptions = {}): Promise<DeviceDistributedDataParallel> {
    return new DeviceDistributedDataParallel(...await DataParallelOn.build(deviceStorage, 'DeviceDistributedDataParallel', comm, params, optimizer, options));
  }
}
