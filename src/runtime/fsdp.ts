/**
 * FSDP / ZeRO sharding, on either storage (storage.ts): host typed arrays over a
 * CPU communicator, or DeviceBuffers over NCCL with kernels for the arithmetic.
 * Each unit's parameters are flattened into one buffer, padded to a multiple of
 * the world size so every rank owns an equal shard. Every stage keeps a float32
 * master shard and steps only it (ZeRO-1); stage 2 also frees each unit's
 * unsharded gradient once it is reduce-scattered; stage 3 also frees unsharded
 * parameters, gathering them before the unit's forward and again before its
 * backward, one unit ahead. With paramDtype bfloat16 the model computes on
 * float32 copies of bf16 values; 16-bit reductions divide by the world first.
 */
import type { Communicator } from '../comm/communicator.js';
import type { DeviceBuffer } from '../gpu/device-buffer.js';
import type { HalfDType } from './cast.js';
import { deviceStorage, type DeviceParam } from './device-storage.js';
import { clipCoefficient, type Optimizer } from './optim.js';
import { fsdpSchema, parse, type FSDPOptions } from './runtime-options.js';
import { shardedPieces } from './state-dict.js';
import { hostStorage, SubmitQueue, type RuntimeParam, type SlotOptimizer, type Sized, type Storage } from './storage.js';
import type { DataParallel, DataParallelState, FlatPiece, MemoryReport, ModelHooks, ParamLike } from './types.js';

/** Unit layout: n elements padded up to a multiple of world, shard = padded / world. */
export function shardLayout(numel: number, world: number): { padded: number; shard: number } {
  const shard = Math.ceil(numel / world);
  return { padded: shard * world, shard };
}

export interface Unit<B, R, P> {
  params: P[];
  offsets: number[];
  padded: number;
  shard: number;
  master: B;
  gradShard: B;
  /** gradShard holds no reduction yet this step (zeroed): the next one is a copy, not an add. */
  fresh: boolean;
  /** Unsharded parameters in paramDtype: kept by stages 1-2, transient in stage 3. */
  full: B | R | null;
  /** float32 unsharded parameters the params are bound to (= full unless bf16). */
  compute: B | null;
  /** Unsharded float32 gradient: kept by stage 1, transient in stages 2-3. */
  grad: B | null;
  gather: Promise<void> | null;
  reduce: Promise<void> | null;
}

type Options = ReturnType<typeof fsdpSchema.parse>;

/** FSDP on one storage; construct it with FullyShardedDataParallel.create or DeviceFullyShardedDataParallel.create. */
export class ShardedDataParallelOn<B extends DeviceBuffer | Float32Array, R extends Sized, U extends B | null> implements DataParallel<RuntimeParam<B, U>, B> {
  readonly hooks: ModelHooks<RuntimeParam<B, U>>;
  readonly #s: Storage<B, R, U>;
  readonly #o: Options;
  readonly #half: HalfDType | null;
  readonly #reduceHalf: HalfDType | null;
  readonly #replicate: Communicator | null;
  readonly #opt: SlotOptimizer<B>;
  readonly #queue = new SubmitQueue();
  #sync = true;
  #zeroing: Promise<unknown> = Promise.resolve();
  #transient = 0;
  #peak = 0;

  protected constructor(readonly comm: Communicator, readonly units: Unit<B, R, RuntimeParam<B, U>>[], readonly optimizer: Optimizer,
    parts: { storage: Storage<B, R, U>; o: Options; replicate: Communicator | null; opt: SlotOptimizer<B> }) {
    const o = (this.#o = parts.o);
    this.#s = parts.storage;
    this.#opt = parts.opt;
    this.#replicate = parts.replicate && parts.replicate.size > 1 ? parts.replicate : null;
    this.#half = o.paramDtype === 'bfloat16' ? 'bfloat16' : null;
    const rd = o.reduceDtype ?? o.paramDtype;
    this.#reduceHalf = rd === 'float32' ? null : rd;
    this.hooks = {
      beforeForward: (u) => this.#before(u, u + 1),
      afterForward: (u) => {
        if (o.stage === 3 && o.reshardAfterForward && u !== this.units.length - 1) this.#reshard(this.units[u]!);
      },
      beforeBackward: (u) => this.#before(u, u - 1, true),
      afterBackward: (u) => this.#afterBackward(this.units[u]!),
    };
  }

  /** Validated options, unit layouts and zeroed shards, and the optimizer state (one slot `unit<i>` per unit). */
  protected static async build<B extends DeviceBuffer | Float32Array, R extends Sized, U extends B | null>(storage: Storage<B, R, U>, name: string,
    comm: Communicator, units: RuntimeParam<B, U>[][], optimizer: Optimizer, options: FSDPOptions) {
    const { replicate, ...rest } = options;
    const o = parse(fsdpSchema, rest, name);
    const built = await Promise.all(units.map(async (params): Promise<Unit<B, R, RuntimeParam<B, U>>> => {
      const offsets: number[] = [];
      let n = 0;
      for (const p of params) {
        offsets.push(n);
        n += p.size;
      }
      const { padded, shard } = shardLayout(n, comm.size);
      return { params, offsets, padded, shard, master: await storage.zeros(shard), gradShard: await storage.zeros(shard), fresh: true,
        full: null, compute: null, grad: null, gather: null, reduce: null };
    }));
    const opt = await storage.optimizer(optimizer, built.map((u, i) => ({ key: `unit${i}`, size: u.shard })));
    return [comm, built, optimizer, { storage, o, replicate: replicate ?? null, opt }] as const;
  }

  /** Shards rank 0's parameters, one unit at a time (broadcasts in the same order everywhere). */
  protected async init(): Promise<this> {
    for (const u of this.units) await this.#shardInitial(u);
    return this;
  }

  async #shardInitial(u: Unit<B, R, RuntimeParam<B, U>>): Promise<void> {
    const s = this.#s;
    const flat = await s.zeros(u.padded);
    await Promise.all(u.params.map((p, i) => p.data !== null && p.size > 0 && p.data.length > 0 && s.copy(s.view(flat, u.offsets[i]!, p.size), p.data)));
    if (this.#o.broadcastParams && this.comm.size > 1) await s.broadcast(this.comm, flat);
    await s.copy(u.master, s.view(flat, this.comm.rank * u.shard, u.shard));
    if (this.#o.stage < 3) {
      if (this.#half) {
        u.full = await s.zerosOf(this.#half, u.padded);
        await s.cast(flat, u.full, this.#half);
        s.free(flat);
      } else {
        u.full = u.compute = flat;
        this.#bindParams(u, flat);
      }
    } else s.free(flat);
    if (this.#o.stage === 1) this.#bindGrads(u, (u.grad = await s.zeros(u.padded)));
    if (!u.compute) this.#bindParams(u, null);
    if (!u.grad) this.#bindGrads(u, null);
  }

  setRequiresGradSync(sync: boolean): void {
    this.#sync = sync;
  }

  zeroGrad(): void {
    const z: Promise<void>[] = [];
    for (const u of this.units) {
      u.fresh = true;
      z.push(this.#s.zero(u.gradShard));
      if (u.grad) z.push(this.#s.zero(u.grad));
    }
    this.#zeroing = Promise.all(z);
  }

  async #before(index: number, prefetch: number, backward = false): Promise<void> {
    await this.#zeroing;
    const u = this.units[index]!;
    const ready = this.#unshard(u);
    // Queued before this unit's reduce-scatter, so backward's gather is not behind it. Its
    // failure reaches whoever awaits the unit; after a fault nobody may, and an unhandled
    // rejection would end the process before the caller can recover.
    if (this.#o.stage === 3 && this.#o.prefetch && prefetch >= 0 && prefetch < this.units.length) this.#unshard(this.units[prefetch]!).catch(() => {});
    if (backward && !u.grad) {
      const grad = (u.grad = await this.#s.zeros(u.padded));
      this.#grow(grad.byteLength);
      this.#bindGrads(u, grad);
    }
    await ready;
  }

  #unshard(u: Unit<B, R, RuntimeParam<B, U>>): Promise<void> {
    if (u.gather) return u.gather;
    const s = this.#s;
    const half = this.#half;
    if (this.#o.stage < 3) {
      if (!half) return (u.gather = Promise.resolve());
      return (u.gather = this.#compute(u, half));
    }
    // Counted at the call, not when the queue gets to it, so the peak follows the hook order only.
    this.#grow(u.padded * (half ? 2 : 4));
    u.gather = this.#queue.run(async () => {
      const full = (u.full = half ? await s.zerosOf(half, u.padded) : await s.zeros(u.padded));
      let input: B | R = u.master;
      if (half) {
        input = await s.zerosOf(half, u.shard);
        await s.cast(u.master, input, half);
      }
      const done = Promise.resolve(s.allGather(this.comm, input, full, half ?? 'float32'));
      return { done: input === u.master ? done : done.then(() => s.free(input)) };
    }).then(() => {
      if (half) return this.#compute(u, half);
      u.compute = u.full as B;
      this.#bindParams(u, u.compute);
    });
    return u.gather;
  }

  /** The float32 copy of a bf16 unit the model computes on. */
  async #compute(u: Unit<B, R, RuntimeParam<B, U>>, half: HalfDType): Promise<void> {
    const compute = await this.#s.zeros(u.padded);
    this.#grow(compute.byteLength);
    await this.#s.cast(u.full!, compute, half);
    u.compute = compute;
    this.#bindParams(u, compute);
  }

  #reshard(u: Unit<B, R, RuntimeParam<B, U>>): void {
    if (this.#o.stage < 3 && !this.#half) return;
    if (u.compute && u.compute !== u.full) {
      this.#grow(-u.compute.byteLength);
      this.#s.free(u.compute);
    }
    if (this.#o.stage === 3) {
      if (u.full) this.#grow(-u.full.byteLength);
      this.#s.free(u.full);
      u.full = null;
    }
    u.compute = null;
    u.gather = null;
    this.#bindParams(u, null);
  }

  #afterBackward(u: Unit<B, R, RuntimeParam<B, U>>): void {
    if (this.#sync) {
      const grad = u.grad!;
      const prev = u.reduce;
      // Stages 2-3 free the unsharded gradient once its reduce-scatter is done with it.
      const next = this.#reduceScatter(u, grad).finally(() => this.#o.stage >= 2 && this.#s.free(grad));
      u.reduce = prev ? Promise.all([prev, next]).then(() => undefined) : next;
      u.reduce.catch(() => {}); // finish() sees a failure; a step a fault ended never calls it
      if (this.#o.stage >= 2) {
        this.#grow(-grad.byteLength);
        u.grad = null;
        this.#bindGrads(u, null);
      }
    }
    this.#reshard(u);
  }

  /** Reduce-scatters the unit's gradient (and all-reduces across replicas, for hybrid sharding) into gradShard. */
  #reduceScatter(u: Unit<B, R, RuntimeParam<B, U>>, grad: B): Promise<void> {
    const s = this.#s;
    const mean = this.#o.reduce === 'mean';
    const rep = this.#replicate;
    const half = this.#reduceHalf;
    const world = this.comm.size * (rep?.size ?? 1);
    let out: B | R | null = null;
    let send: B | R | null = null;
    const reduced = this.#queue.run(async () => {
      if (!half) {
        const recv = (out = await s.zeros(u.shard));
        const op = mean ? 'avg' : 'sum';
        const rs = Promise.resolve(s.reduceScatter(this.comm, grad, recv, { op, dtype: 'float32' }));
        return { done: rs.then(() => rep && s.allReduce(rep, recv, { op, dtype: 'float32' })) };
      }
      // 16 bits: each rank's value is divided by the world before the sum (no overflow).
      const c = await s.compress(grad, half, mean ? 1 / world : null);
      send = c.buf;
      const recv = (out = await s.zerosOf(half, u.shard));
      const rs = Promise.resolve(s.reduceScatter(this.comm, c.buf, recv, { op: 'sum', dtype: half, premul: c.premul }));
      return { done: rs.then(() => rep && s.allReduce(rep, recv, { op: 'sum', dtype: half })) };
    });
    return reduced.then(async () => {
      let f32 = out as B;
      if (half) {
        f32 = await s.zeros(u.shard);
        await s.cast(out!, f32, half);
      }
      // Claimed before awaiting, so two reductions landing together cannot both copy.
      const fresh = u.fresh;
      u.fresh = false;
      if (fresh) await s.copy(u.gradShard, f32);
      else await s.addInto(u.gradShard, f32);
      if (f32 !== out) s.free(f32);
    }).finally(() => {
      s.free(out);
      s.free(send);
    });
  }

  async finish(): Promise<void> {
    await Promise.all(this.units.map((u) => u.reduce));
    for (const u of this.units) u.reduce = null;
  }

  /** Shards are disjoint (padding is zero), so the global norm is a local Σx² and one float64 all-reduce. */
  async clipGradNorm(maxNorm: number): Promise<number> {
    const shards = this.units.map((u) => u.gradShard);
    const norm = Math.sqrt(await this.#s.allReduceScalar(this.comm, await this.#s.sumSquares(shards)));
    const c = clipCoefficient(norm, maxNorm);
    if (c < 1) await this.#s.scaleBy(shards, c);
    return norm;
  }

  /** The optimizer step on this rank's shards (slots unit<i>), then stages 1-2 re-gather. */
  async step(): Promise<void> {
    await this.#opt.step(this.units.map((u, i) => ({ key: `unit${i}`, param: u.master, grad: u.gradShard })));
    await this.#publish();
  }

  /** Per-parameter pieces of this rank's master shards and optimizer state (padding dropped). Call between steps. */
  stateDict(): DataParallelState<B> {
    return { tensors: shardedPieces(this.units, this.#opt, this.comm.rank), optimizerStep: this.#opt.state([]).step };
  }

  /**
   * Fills masters and optimizer state in place, drops any unit still gathered from the
   * old masters (a stage-3 unit, a bf16 compute copy), and re-gathers stages 1-2 (collective).
   */
  async loadStateDict(fill: (targets: Record<string, FlatPiece<B>>) => Promise<{ optimizerStep: number }>): Promise<void> {
    const { optimizerStep } = await fill(this.stateDict().tensors);
    this.#opt.loadState({ step: optimizerStep });
    for (const u of this.units) if (u.gather) await u.gather.then(() => this.#reshard(u));
    await this.#publish();
  }

  /** Brings the unsharded parameters of stages 1-2 up to date with the masters. */
  async #publish(): Promise<void> {
    if (this.#o.stage === 3) return; // gathered from the masters before the next forward
    const s = this.#s;
    const half = this.#half;
    await Promise.all(this.units.map((u) => this.#queue.run(async () => {
      if (!half) return { done: s.allGather(this.comm, u.master, u.full!, 'float32') };
      const shard = await s.zerosOf(half, u.shard);
      await s.cast(u.master, shard, half);
      return { done: Promise.resolve(s.allGather(this.comm, shard, u.full!, half)).then(() => s.free(shard)) };
    })));
  }

  memory(): MemoryReport {
    let params = 0;
    let grads = 0;
    for (const u of this.units) {
      params += u.master.byteLength + (this.#o.stage < 3 ? u.full!.byteLength : 0);
      grads += u.gradShard.byteLength + (this.#o.stage === 1 ? u.grad!.byteLength : 0);
    }
    return { params, grads, optimizer: this.#opt.stateBytes(), peakTransient: this.#peak };
  }

  /** Full, unpadded parameter values on the host (a collective: every rank must call it). */
  async gatherParams(): Promise<Float32Array[]> {
    const out: Float32Array[] = [];
    for (const u of this.units) {
      const full = await this.#s.zeros(u.padded);
      await this.#queue.run(async () => ({ done: this.#s.allGather(this.comm, u.master, full, 'float32') }));
      const host = await this.#s.toHost(full);
      u.params.forEach((p, i) => out.push(host.slice(u.offsets[i], u.offsets[i]! + p.size)));
      this.#s.free(full);
    }
    return out;
  }

  /** Frees every unit buffer and the optimizer state (parameters' original buffers belong to the caller). */
  dispose(): void {
    for (const u of this.units) {
      if (u.compute && u.compute !== u.full) this.#s.free(u.compute);
      for (const b of [u.master, u.gradShard, u.full, u.grad]) this.#s.free(b);
      u.full = u.compute = u.grad = null;
    }
    this.#opt.dispose();
  }

  #bindParams(u: Unit<B, R, RuntimeParam<B, U>>, flat: B | null): void {
    u.params.forEach((p, i) => (p.data = flat === null ? this.#s.unbound : this.#s.view(flat, u.offsets[i]!, p.size)));
  }

  #bindGrads(u: Unit<B, R, RuntimeParam<B, U>>, flat: B | null): void {
    u.params.forEach((p, i) => (p.grad = flat === null ? this.#s.unbound : this.#s.view(flat, u.offsets[i]!, p.size)));
  }

  #grow(bytes: number): void {
    this.#transient += bytes;
    this.#peak = Math.max(this.#peak, this.#transient);
  }
}

/** FSDP on host arrays over a CPU communicator. */
export class FullyShardedDataParallel extends ShardedDataParallelOn<Float32Array, Float32Array | Uint16Array | Float64Array, Float32Array> {
  static async create(comm: Communicator, units: ParamLike[][], optimizer: Optimizer, options: FSDPOptions): Promise<FullyShardedDataParallel> {
    return new FullyShardedDataParallel(...await ShardedDataParallelOn.build(hostStorage, 'FullyShardedDataParallel', comm, units, optimizer, options)).init();
  }
}

/** FSDP on DeviceBuffers over an NCCL communicator; `optimizer` gives the hyper-parameters, its state lives on the device. */
export class DeviceFullyShardedDataParallel extends ShardedDataParallelOn<DeviceBuffer, DeviceBuffer, null> {
  static async create(comm: Communicator, units: DeviceParam[][], optimizer: Optimizer, options: FSDPOptions): Promise<DeviceFullyShardedDataParallel> {
    return new DeviceFullyShardedDataParallel(...await ShardedDataParallelOn.build(deviceStorage, 'DeviceFullyShardedDataParallel', comm, units, optimizer, options)).init();
  }
}
