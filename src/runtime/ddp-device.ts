/**
 * DDP bucketing on the GPU path: the same buckets, order and overlap as ddp.ts,
 * with gradients in float32 DeviceBuffers (param.grad becomes a view of its
 * device bucket) all-reduced by an NCCL communicator. Compression casts with the
 * kernels and pre-divides with NCCL's premulsum. Clipping and the optimizer step
 * run in kernels (optim-device.ts): optimizer state lives in DeviceBuffers and is
 * checkpointed from there.
 */
import type { Communicator } from '../comm/communicator.js';
import type { DeviceBuffer } from '../gpu/device-buffer.js';
import { allReducePreMulSum } from '../gpu/group.js';
import { NcclNodeError } from '../errors.js';
import { assignBuckets } from './ddp.js';
import { cast, deviceSumSquares, scaleBy, slice, SubmitQueue, zeros, type DeviceParam } from './device.js';
import { clipCoefficient, type Optimizer } from './optim.js';
import { DeviceOptimizer } from './optim-device.js';
import { ddpSchema, parse, type DDPOptions } from './options.js';
import { replicatedSlices, wholeTensors } from './state-dict.js';
import type { DataParallel, DataParallelState, DevicePieceData, FlatPiece, MemoryReport, ModelHooks } from './types.js';
import { BucketOrder } from './bucket-order.js';

/**
 * DataParallel on DeviceParams. State-dict pieces of parameters and optimizer
 * state are DeviceBuffer views. A DeviceParam may carry `shape` (read when present) for
 * the global shape recorded in checkpoints.
 */
export type DeviceDataParallel = DataParallel<DeviceParam, DevicePieceData>;

interface Bucket {
  params: DeviceParam[];
  flat: DeviceBuffer;
  work: Promise<void> | null;
}

export class DeviceDistributedDataParallel implements DeviceDataParallel {
  readonly hooks: ModelHooks<DeviceParam>;
  readonly #o: ReturnType<typeof ddpSchema.parse>;
  readonly #order: BucketOrder<DeviceParam, Bucket>;
  readonly #queue = new SubmitQueue();
  #sync = true;
  /** zeroGrad's memsets; forward waits for them (zeroGrad itself is synchronous). */
  #zeroing: Promise<unknown> = Promise.resolve();

  readonly #opt: DeviceOptimizer;

  /** `optimizer` gives the hyper-parameters; its state lives on the device (#opt), not in it. */
  private constructor(readonly comm: Communicator, readonly params: DeviceParam[], readonly optimizer: Optimizer, readonly buckets: Bucket[], o: ReturnType<typeof ddpSchema.parse>, opt: DeviceOptimizer) {
    this.#o = o;
    this.#opt = opt;
    this.#order = new BucketOrder('DeviceDistributedDataParallel', buckets, (b) => this.#launch(b));
    this.hooks = {
      beforeForward: (u) => (u === 0 ? this.#zeroing.then(() => undefined) : undefined),
      gradReady: (p) => this.markReady(p),
    };
  }

  /** Buckets exactly as the host DDP assigns them; each param's gradient is copied into its bucket. */
  static async create(comm: Communicator, params: DeviceParam[], optimizer: Optimizer, options: DDPOptions = {}): Promise<DeviceDistributedDataParallel> {
    const o = parse(ddpSchema, options, 'DeviceDistributedDataParallel');
    const groups = assignBuckets(params.map((p) => p.size), o.firstBucketBytes, o.bucketBytes);
    const buckets = await Promise.all(groups.map(async (idx) => {
      const ps = idx.map((i) => params[i]!);
      const flat = await zeros('float32', ps.reduce((a, p) => a + p.size, 0));
      let off = 0;
      for (const p of ps) {
        const view = slice(flat, off, p.size);
        if (p.grad) await view.copyFromDevice(p.grad.length === p.size ? p.grad : slice(p.grad, 0, p.size));
        p.grad = view;
        off += p.size;
      }
      return { params: ps, flat, work: null };
    }));
    if (o.broadcastParams && comm.size > 1) await Promise.all(params.map((p) => comm.broadcast(need(p, 'data'), { root: 0 })));
    const opt = await DeviceOptimizer.create(optimizer, params.map((p) => ({ key: p.name, size: p.size })));
    return new DeviceDistributedDataParallel(comm, params, optimizer, buckets, o, opt);
  }

  setRequiresGradSync(sync: boolean): void {
    this.#sync = sync;
  }

  zeroGrad(): void {
    this.#zeroing = Promise.all(this.buckets.map((b) => b.flat.fillBytes(0)));
  }

  /** Same contract as DistributedDataParallel.markReady: buckets launch strictly in bucket order. */
  markReady(p: DeviceParam): void {
    if (this.#sync) this.#order.markReady(p);
  }

  #launch(b: Bucket): void {
    const { comm } = this;
    const mean = this.#o.reduce === 'mean';
    if (this.#o.compression === 'none') {
      b.work = this.#queue.run(async () => ({ done: comm.allReduce(b.flat, { op: mean ? 'avg' : 'sum' }) }));
      return;
    }
    // 16 bits: cast, then premulsum by 1/N so each rank's value is divided before the
    // sum (fp16_compress_hook's order; a sum of N large fp16 gradients overflows).
    const half = this.#o.compression;
    let tmp: DeviceBuffer | null = null;
    b.work = this.#queue.run(async () => {
      tmp = await zeros(half, b.flat.length);
      await cast(b.flat, tmp);
      return { done: mean ? allReducePreMulSum(comm, tmp, 1 / comm.size) : comm.allReduce(tmp, { op: 'sum' }) };
    }).then(() => cast(tmp!, b.flat)).finally(() => tmp?.dispose());
  }

  async finish(): Promise<void> {
    if (!this.#sync) return;
    this.#order.assertComplete(this.params);
    await Promise.all(this.buckets.map((b) => b.work));
    for (const b of this.buckets) b.work = null;
    this.#order.reset();
  }

  /** Gradients are identical on every rank after finish(): no communication, kernels only. */
  async clipGradNorm(maxNorm: number): Promise<number> {
    const flats = this.buckets.map((b) => b.flat);
    const norm = Math.sqrt(await deviceSumSquares(flats));
    const c = clipCoefficient(norm, maxNorm);
    if (c < 1) await scaleBy(flats, c);
    return norm;
  }

  /** The optimizer step in kernels, on every parameter in place. */
  async step(): Promise<void> {
    await this.#opt.step(this.params.map((p) => ({ key: p.name, param: need(p, 'data'), grad: need(p, 'grad') })));
  }

  /**
   * As DistributedDataParallel.stateDict: parameters and optimizer state are
   * replicated, so each rank saves its 1/world flat slice of every tensor (the
   * parameter slice a view of the live DeviceBuffer). Call after step() resolved.
   */
  stateDict(): DataParallelState<DevicePieceData> {
    const tensors = replicatedSlices(this.params, (p) => need(p, 'data'), this.#opt, this.comm.rank, this.comm.size);
    return { tensors, optimizerStep: this.#opt.state([]).step };
  }

  /**
   * Every rank reads every tensor whole into its parameters and optimizer state
   * (both on the device), so replicas agree again without a broadcast.
   */
  async loadStateDict(fill: (targets: Record<string, FlatPiece<DevicePieceData>>) => Promise<{ optimizerStep: number }>): Promise<void> {
    const { optimizerStep } = await fill(wholeTensors(this.params, (p) => need(p, 'data'), this.#opt));
    this.#opt.loadState({ step: optimizerStep });
  }

  memory(): MemoryReport {
    const n = this.buckets.reduce((a, b) => a + b.flat.length, 0);
    return { params: 4 * n, grads: 4 * n, optimizer: this.#opt.stateBytes(), peakTransient: 0 };
  }

  /** Frees the device buckets and optimizer state (parameters belong to the caller). */
  dispose(): void {
    for (const b of this.buckets) b.flat.dispose();
    this.#opt.dispose();
  }
}

function need(p: DeviceParam, what: 'data' | 'grad'): DeviceBuffer {
  const b = p[what];
  if (!b) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${p.name}.${what} is not bound to a DeviceBuffer`);
  return b;
}
