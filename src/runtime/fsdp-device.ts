/**
 * FSDP / ZeRO 1-3 on the GPU path: fsdp.ts's layout, stages and hook order, with
 * every unit buffer a DeviceBuffer and the collectives on an NCCL communicator.
 * Flattening, sharding and rebinding are device-to-device copies and views;
 * bf16/fp16 conversions are the cast kernel; 16-bit reduce-scatters pre-divide
 * with premulsum. A unit's first reduction of a step is copied into its float32
 * gradient shard on the device; accumulating a second one, clipping and the
 * optimizer step are kernels too (optim-device.ts), so no shard leaves the GPU and
 * optimizer state, and its checkpoint pieces, live in DeviceBuffers.
 */
import type { Communicator } from '../comm/communicator.js';
import type { DeviceBuffer } from '../gpu/device-buffer.js';
import { allReducePreMulSum, reduceScatterPreMulSum } from '../gpu/group.js';
import type { HalfDType } from './cast.js';
import type { DeviceDataParallel } from './ddp-device.js';
import { addInto, cast, deviceSumSquares, scaleBy, slice, SubmitQueue, zeros, type DeviceParam } from './device.js';
import { shardLayout } from './fsdp.js';
import { clipCoefficient, type Optimizer } from './optim.js';
import { DeviceOptimizer } from './optim-device.js';
import { fsdpSchema, parse, type FSDPOptions } from './options.js';
import { shardedPieces } from './state-dict.js';
import type { DataParallelState, DevicePieceData, FlatPiece, MemoryReport, ModelHooks } from './types.js';

interface Unit {
  params: DeviceParam[];
  offsets: number[];
  padded: number;
  shard: number;
  master: DeviceBuffer;
  gradShard: DeviceBuffer;
  /** gradShard holds no reduction yet this step (zeroed): the next one is a copy, not an add. */
  fresh: boolean;
  /** Unsharded parameters in paramDtype: kept by stages 1-2, transient in stage 3. */
  full: DeviceBuffer | null;
  /** float32 unsharded parameters the params are bound to (= full unless bf16). */
  compute: DeviceBuffer | null;
  /** Unsharded float32 gradient: kept by stage 1, transient in stages 2-3. */
  grad: DeviceBuffer | null;
  gather: Promise<void> | null;
  reduce: Promise<void> | null;
}

export class DeviceFullyShardedDataParallel implements DeviceDataParallel {
  readonly hooks: ModelHooks<DeviceParam>;
  readonly #o: ReturnType<typeof fsdpSchema.parse>;
  readonly #half: HalfDType | null;
  readonly #reduceHalf: HalfDType | null;
  readonly #replicate: Communicator | null;
  readonly #queue = new SubmitQueue();
  #sync = true;
  #zeroing: Promise<unknown> = Promise.resolve();

  readonly #opt: DeviceOptimizer;

  /** `optimizer` gives the hyper-parameters; its state lives on the device (#opt), one shard per unit. */
  private constructor(readonly comm: Communicator, readonly units: Unit[], readonly optimizer: Optimizer, o: ReturnType<typeof fsdpSchema.parse>, replicate: Communicator | null, opt: DeviceOptimizer) {
    this.#o = o;
    this.#opt = opt;
    this.#replicate = replicate && replicate.size > 1 ? replicate : null;
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

  static async create(comm: Communicator, units: DeviceParam[][], optimizer: Optimizer, options: FSDPOptions): Promise<DeviceFullyShardedDataParallel> {
    const { replicate, ...rest } = options;
    const o = parse(fsdpSchema, rest, 'DeviceFullyShardedDataParallel');
    const built = await Promise.all(units.map(async (params) => {
      const offsets: number[] = [];
      let n = 0;
      for (const p of params) {
        offsets.push(n);
        n += p.size;
      }
      const { padded, shard } = shardLayout(n, comm.size);
      const u: Unit = { params, offsets, padded, shard, master: await zeros('float32', shard), gradShard: await zeros('float32', shard), fresh: true,
        full: null, compute: null, grad: null, gather: null, reduce: null };
      return u;
    }));
    const opt = await DeviceOptimizer.create(optimizer, built.map((u, i) => ({ key: `unit${i}`, size: u.shard })));
    const f = new DeviceFullyShardedDataParallel(comm, built, optimizer, o, replicate ?? null, opt);
    for (const u of built) await f.#shardInitial(u); // one unit at a time: broadcasts in the same order everywhere
    return f;
  }

  async #shardInitial(u: Unit): Promise<void> {
    const flat = await zeros('float32', u.padded);
    await Promise.all(u.params.map((p, i) => p.data && slice(flat, u.offsets[i]!, p.size).copyFromDevice(slice(p.data, 0, p.size))));
    if (this.#o.broadcastParams && this.comm.size > 1) await this.comm.broadcast(flat, { root: 0 });
    await u.master.copyFromDevice(slice(flat, this.comm.rank * u.shard, u.shard));
    if (this.#o.stage < 3) {
      if (this.#half) {
        u.full = await zeros(this.#half, u.padded);
        await cast(flat, u.full);
        flat.dispose();
      } else {
        u.full = u.compute = flat;
        this.#bindParams(u, flat);
      }
    } else flat.dispose();
    if (this.#o.stage === 1) this.#bindGrads(u, (u.grad = await zeros('float32', u.padded)));
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
      z.push(u.gradShard.fillBytes(0));
      if (u.grad) z.push(u.grad.fillBytes(0));
    }
    this.#zeroing = Promise.all(z);
  }

  async #before(index: number, prefetch: number, backward = false): Promise<void> {
    await this.#zeroing;
    const u = this.units[index]!;
    const ready = this.#unshard(u);
    // Queued before this unit's reduce-scatter, so backward's gather is not behind it.
    if (this.#o.stage === 3 && this.#o.prefetch && prefetch >= 0 && prefetch < this.units.length) void this.#unshard(this.units[prefetch]!);
    if (backward && !u.grad) this.#bindGrads(u, (u.grad = await zeros('float32', u.padded)));
    await ready;
  }

  #unshard(u: Unit): Promise<void> {
    if (u.gather) return u.gather;
    const half = this.#half;
    if (this.#o.stage < 3) {
      if (!half) return (u.gather = Promise.resolve());
      return (u.gather = (async () => {
        u.compute = await zeros('float32', u.padded);
        await cast(u.full!, u.compute);
        this.#bindParams(u, u.compute);
      })());
    }
    u.gather = this.#queue.run(async () => {
      u.full = await zeros(half ?? 'float32', u.padded);
      let input = u.master;
      if (half) {
        input = await zeros(half, u.shard);
        await cast(u.master, input);
      }
      const done = this.comm.allGather(input, u.full);
      return { done: half ? done.then(() => input.dispose()) : done };
    }).then(async () => {
      if (half) {
        u.compute = await zeros('float32', u.padded);
        await cast(u.full!, u.compute);
      } else u.compute = u.full;
      this.#bindParams(u, u.compute);
    });
    return u.gather;
  }

  #reshard(u: Unit): void {
    if (this.#o.stage < 3 && !this.#half) return;
    if (u.compute && u.compute !== u.full) u.compute.dispose();
    if (this.#o.stage === 3) {
      u.full?.dispose();
      u.full = null;
    }
    u.compute = null;
    u.gather = null;
    this.#bindParams(u, null);
  }

  #afterBackward(u: Unit): void {
    if (this.#sync) {
      const grad = u.grad!;
      const prev = u.reduce;
      // Stages 2-3 free the unsharded gradient once its reduce-scatter is done with it.
      const next = this.#reduceScatter(u, grad).finally(() => this.#o.stage >= 2 && grad.dispose());
      u.reduce = prev ? Promise.all([prev, next]).then(() => undefined) : next;
      if (this.#o.stage >= 2) {
        u.grad = null;
        this.#bindGrads(u, null);
      }
    }
    this.#reshard(u);
  }

  /** Reduce-scatters the unit's gradient (and all-reduces across replicas) into gradShard. */
  #reduceScatter(u: Unit, grad: DeviceBuffer): Promise<void> {
    const mean = this.#o.reduce === 'mean';
    const rep = this.#replicate;
    const half = this.#reduceHalf;
    let out: DeviceBuffer | null = null;
    let send: DeviceBuffer | null = null;
    const world = this.comm.size * (rep?.size ?? 1);
    const reduced = this.#queue.run(async () => {
      if (!half) {
        out = await zeros('float32', u.shard);
        const op = mean ? 'avg' : 'sum';
        return { done: this.comm.reduceScatter(grad, out, { op }).then(() => rep && rep.allReduce(out!, { op })) };
      }
      // 16 bits: each rank's value is divided by the world before the sum (no overflow).
      send = await zeros(half, u.padded);
      await cast(grad, send);
      out = await zeros(half, u.shard);
      const rs = mean ? reduceScatterPreMulSum(this.comm, send, out, 1 / world) : this.comm.reduceScatter(send, out, { op: 'sum' });
      return { done: rs.then(() => rep && rep.allReduce(out!, { op: 'sum' })) };
    });
    return reduced.then(async () => {
      let f32 = out!;
      if (half) {
        f32 = await zeros('float32', u.shard);
        await cast(out!, f32);
      }
      if (u.fresh) await u.gradShard.copyFromDevice(f32);
      else await addInto(u.gradShard, f32); // accumulated reductions (kernel)
      u.fresh = false;
      if (f32 !== out) f32.dispose();
    }).finally(() => {
      (out as DeviceBuffer | null)?.dispose();
      (send as DeviceBuffer | null)?.dispose();
    });
  }

  async finish(): Promise<void> {
    await Promise.all(this.units.map((u) => u.reduce));
    for (const u of this.units) u.reduce = null;
  }

  /** Shards are disjoint (padding is zero): local Σx² (kernel), then one float64 all-reduce on the device. */
  async clipGradNorm(maxNorm: number): Promise<number> {
    const local = await zeros('float64', 1);
    await local.copyFrom(new Float64Array([await deviceSumSquares(this.units.map((u) => u.gradShard))]));
    if (this.comm.size > 1) await this.comm.allReduce(local, { op: 'sum' });
    const norm = Math.sqrt(((await local.toHost()) as Float64Array)[0]!);
    local.dispose();
    const c = clipCoefficient(norm, maxNorm);
    if (c < 1) await scaleBy(this.units.map((u) => u.gradShard), c);
    return norm;
  }

  /** The optimizer step in kernels on the shards (keys unit<i>, as the host FSDP), then stages 1-2 re-gather. */
  async step(): Promise<void> {
    await this.#opt.step(this.units.map((u, i) => ({ key: `unit${i}`, param: u.master, grad: u.gradShard })));
    await this.#publish();
  }

  /** FullyShardedDataParallel's pieces: master and optimizer shards as DeviceBuffer views. Call between steps. */
  stateDict(): DataParallelState<DevicePieceData> {
    return { tensors: shardedPieces(this.units, this.#opt, this.comm.rank), optimizerStep: this.#opt.state([]).step };
  }

  /**
   * Fills masters and optimizer state in place, drops any unit still gathered from the
   * old masters (a stage-3 unit, a bf16 compute copy), and re-gathers stages 1-2 (collective).
   */
  async loadStateDict(fill: (targets: Record<string, FlatPiece<DevicePieceData>>) => Promise<{ optimizerStep: number }>): Promise<void> {
    const { optimizerStep } = await fill(this.stateDict().tensors);
    this.#opt.loadState({ step: optimizerStep });
    for (const u of this.units) if (u.gather) await u.gather.then(() => this.#reshard(u));
    await this.#publish();
  }

  /** Brings the unsharded parameters of stages 1-2 up to date with the masters. */
  async #publish(): Promise<void> {
    if (this.#o.stage === 3) return; // gathered from the masters before the next forward
    const half = this.#half;
    await Promise.all(this.units.map((u) => this.#queue.run(async () => {
      if (!half) return { done: this.comm.allGather(u.master, u.full!) };
      const shard = await zeros(half, u.shard);
      await cast(u.master, shard);
      return { done: this.comm.allGather(shard, u.full!).then(() => shard.dispose()) };
    })));
  }

  memory(): MemoryReport {
    let params = 0, grads = 0;
    for (const u of this.units) {
      params += u.master.byteLength + (this.#o.stage < 3 ? u.full!.byteLength : 0);
      grads += u.gradShard.byteLength + (this.#o.stage === 1 ? u.grad!.byteLength : 0);
    }
    return { params, grads, optimizer: this.#opt.stateBytes(), peakTransient: 0 };
  }

  /** Full, unpadded parameter values on the host (a collective: every rank must call it). */
  async gatherParams(): Promise<Float32Array[]> {
    const out: Float32Array[] = [];
    for (const u of this.units) {
      const full = await zeros('float32', u.padded);
      await this.#queue.run(async () => ({ done: this.comm.allGather(u.master, full) }));
      const host = (await full.toHost()) as Float32Array;
      full.dispose();
      u.params.forEach((p, i) => out.push(host.slice(u.offsets[i], u.offsets[i]! + p.size)));
    }
    return out;
  }

  #bindParams(u: Unit, flat: DeviceBuffer | null): void {
    u.params.forEach((p, i) => (p.data = flat && slice(flat, u.offsets[i]!, p.size)));
  }

  #bindGrads(u: Unit, flat: DeviceBuffer | null): void {
    u.params.forEach((p, i) => (p.grad = flat && slice(flat, u.offsets[i]!, p.size)));
  }
}
