/**
 * FSDP / ZeRO sharding. Each unit's parameters are flattened into one array,
 * padded to a multiple of the world size so every rank owns an equal shard.
 * Every stage keeps a float32 master shard and steps only it (ZeRO-1);
 * stage 2 also frees each unit's unsharded gradient once it is
 * reduce-scattered; stage 3 also frees unsharded parameters, gathering them
 * before the unit's forward and again before its backward, one unit ahead.
 * With paramDtype bfloat16 the model computes on float32 copies of bf16 values.
 */
import type { Communicator } from '../comm/communicator.js';
import { fromHalf, toHalf, type HalfDType } from './cast.js';
import { clipCoefficient, sumSquares, type Optimizer } from './optim.js';
import { fsdpSchema, parse, type FSDPOptions } from './options.js';
import { shardedPieces } from './state-dict.js';
import type { DataParallel, DataParallelState, FlatPiece, MemoryReport, ModelHooks, ParamLike } from './types.js';

const EMPTY = new Float32Array(0);

/** Unit layout: n elements padded up to a multiple of world, shard = padded / world. */
export function shardLayout(numel: number, world: number): { padded: number; shard: number } {
  const shard = Math.ceil(numel / world);
  return { padded: shard * world, shard };
}

interface Unit {
  params: ParamLike[];
  offsets: number[];
  padded: number;
  shard: number;
  master: Float32Array;
  gradShard: Float32Array;
  /** Unsharded parameters in paramDtype: kept by stages 1-2, transient in stage 3. */
  full: Float32Array | Uint16Array | null;
  /** What the params are bound to while the unit is unsharded. */
  compute: Float32Array | null;
  /** Unsharded float32 gradient: kept by stage 1, transient in stages 2-3. */
  grad: Float32Array | null;
  gather: Promise<void> | null;
  reduce: Promise<void> | null;
}

export class FullyShardedDataParallel implements DataParallel {
  readonly units: Unit[];
  readonly hooks: ModelHooks;
  readonly #o: ReturnType<typeof fsdpSchema.parse>;
  readonly #half: HalfDType | null;
  readonly #reduceHalf: HalfDType | null;
  readonly #replicate: Communicator | null;
  #sync = true;
  #transient = 0;
  #peak = 0;

  private constructor(readonly comm: Communicator, units: ParamLike[][], readonly optimizer: Optimizer, options: FSDPOptions) {
    const { replicate, ...rest } = options;
    this.#o = parse(fsdpSchema, rest, 'FullyShardedDataParallel');
    this.#replicate = replicate && replicate.size > 1 ? replicate : null;
    this.#half = this.#o.paramDtype === 'bfloat16' ? 'bfloat16' : null;
    const rd = this.#o.reduceDtype ?? this.#o.paramDtype;
    this.#reduceHalf = rd === 'float32' ? null : rd;
    this.units = units.map((params) => {
      const offsets: number[] = [];
      let n = 0;
      for (const p of params) {
        offsets.push(n);
        n += p.size;
      }
      const { padded, shard } = shardLayout(n, comm.size);
      return { params, offsets, padded, shard, master: EMPTY, gradShard: new Float32Array(shard), full: null, compute: null, grad: null, gather: null, reduce: null };
    });
    this.hooks = {
      beforeForward: (u) => this.#before(u, u + 1),
      afterForward: (u) => {
        if (this.#o.stage === 3 && this.#o.reshardAfterForward && u !== this.units.length - 1) this.#reshard(this.units[u]!);
      },
      beforeBackward: (u) => this.#before(u, u - 1, true),
      afterBackward: (u) => this.#afterBackward(this.units[u]!),
    };
  }

  static async create(comm: Communicator, units: ParamLike[][], optimizer: Optimizer, options: FSDPOptions): Promise<FullyShardedDataParallel> {
    const f = new FullyShardedDataParallel(comm, units, optimizer, options);
    await Promise.all(f.units.map((u) => f.#shardInitial(u)));
    return f;
  }

  async #shardInitial(u: Unit): Promise<void> {
    const flat = new Float32Array(u.padded);
    u.params.forEach((p, i) => flat.set(p.data.subarray(0, p.size), u.offsets[i]));
    if (this.#o.broadcastParams && this.comm.size > 1) await this.comm.broadcast(flat, { root: 0 });
    u.master = flat.slice(this.comm.rank * u.shard, (this.comm.rank + 1) * u.shard);
    if (this.#o.stage < 3) {
      if (this.#half) {
        u.full = new Uint16Array(u.padded);
        toHalf(flat, u.full, this.#half);
      } else {
        u.full = u.compute = flat;
        this.#bindParams(u, flat);
      }
    }
    if (this.#o.stage === 1) this.#bindGrads(u, (u.grad = new Float32Array(u.padded)));
    if (!u.compute) this.#bindParams(u, EMPTY);
    if (!u.grad) this.#bindGrads(u, EMPTY);
  }

  setRequiresGradSync(sync: boolean): void {
    this.#sync = sync;
  }

  zeroGrad(): void {
    for (const u of this.units) {
      u.gradShard.fill(0);
      u.grad?.fill(0);
    }
  }

  async #before(index: number, prefetch: number, backward = false): Promise<void> {
    const u = this.units[index]!;
    const ready = this.#unshard(u);
    // Issued before this unit's reduce-scatter, so backward's gather is not queued behind it.
    if (this.#o.stage === 3 && this.#o.prefetch && prefetch >= 0 && prefetch < this.units.length) void this.#unshard(this.units[prefetch]!);
    if (backward && !u.grad) {
      u.grad = new Float32Array(u.padded);
      this.#grow(u.grad.byteLength);
      this.#bindGrads(u, u.grad);
    }
    await ready;
  }

  #unshard(u: Unit): Promise<void> {
    if (u.gather) return u.gather;
    if (this.#o.stage < 3) {
      if (this.#half) {
        u.compute = new Float32Array(u.padded);
        this.#grow(u.compute.byteLength);
        fromHalf(u.full as Uint16Array, u.compute, this.#half);
        this.#bindParams(u, u.compute);
      }
      return (u.gather = Promise.resolve());
    }
    const half = this.#half;
    let input: Float32Array | Uint16Array = u.master;
    if (half) toHalf(u.master, (input = new Uint16Array(u.shard)), half);
    const out = half ? new Uint16Array(u.padded) : new Float32Array(u.padded);
    u.full = out;
    this.#grow(out.byteLength);
    const work = this.comm.allGather(input, out, half ? { dtype: half } : {});
    u.gather = work.then(() => {
      if (half) {
        u.compute = new Float32Array(u.padded);
        this.#grow(u.compute.byteLength);
        fromHalf(out as Uint16Array, u.compute, half);
      } else u.compute = out as Float32Array;
      this.#bindParams(u, u.compute);
    });
    return u.gather;
  }

  #reshard(u: Unit): void {
    if (this.#o.stage < 3 && !this.#half) return;
    if (u.compute && u.compute !== u.full) this.#grow(-u.compute.byteLength);
    if (this.#o.stage === 3 && u.full) this.#grow(-u.full.byteLength);
    if (this.#o.stage === 3) u.full = null;
    u.compute = null;
    u.gather = null;
    this.#bindParams(u, EMPTY);
  }

  #afterBackward(u: Unit): void {
    if (this.#sync) {
      const prev = u.reduce;
      const next = this.#reduceScatter(u, u.grad!);
      u.reduce = prev ? Promise.all([prev, next]).then(() => undefined) : next;
      if (this.#o.stage >= 2) {
        this.#grow(-u.grad!.byteLength);
        u.grad = null;
        this.#bindGrads(u, EMPTY);
      }
    }
    this.#reshard(u);
  }

  /** Reduce-scatters the unit's gradient (across replicas too, for hybrid sharding) into gradShard. */
  #reduceScatter(u: Unit, grad: Float32Array): Promise<void> {
    const mean = this.#o.reduce === 'mean';
    const rep = this.#replicate;
    const half = this.#reduceHalf;
    if (!half) {
      const out = new Float32Array(u.shard);
      const op = mean ? 'avg' : 'sum';
      return this.comm.reduceScatter(grad, out, { op })
        .then(() => (rep ? rep.allReduce(out, { op }) : undefined))
        .then(() => {
          for (let i = 0; i < out.length; i++) u.gradShard[i] = u.gradShard[i]! + out[i]!;
        });
    }
    // 16-bit: divide first (no overflow in the sum), reduce in 16 bits, accumulate in float32.
    const world = this.comm.size * (rep?.size ?? 1);
    const send = new Uint16Array(u.padded);
    toHalf(grad, send, half, mean ? 1 / world : 1);
    const out = new Uint16Array(u.shard);
    return this.comm.reduceScatter(send, out, { op: 'sum', dtype: half })
      .then(() => (rep ? rep.allReduce(out, { op: 'sum', dtype: half }) : undefined))
      .then(() => fromHalf(out, u.gradShard, half, true));
  }

  async finish(): Promise<void> {
    await Promise.all(this.units.map((u) => u.reduce));
    for (const u of this.units) u.reduce = null;
  }

  /** Shards are disjoint (padding is zero), so the global norm is one scalar all-reduce. */
  async clipGradNorm(maxNorm: number): Promise<number> {
    const local = new Float64Array([sumSquares(this.units.map((u) => u.gradShard))]);
    if (this.comm.size > 1) await this.comm.allReduce(local, { op: 'sum' });
    const norm = Math.sqrt(local[0]!);
    const c = clipCoefficient(norm, maxNorm);
    if (c < 1) for (const u of this.units) for (let i = 0; i < u.shard; i++) u.gradShard[i] = u.gradShard[i]! * (c);
    return norm;
  }

  async step(): Promise<void> {
    this.optimizer.step(this.units.map((u, i) => ({ key: `unit${i}`, param: u.master, grad: u.gradShard })));
    await this.#publish();
  }

  /** Per-parameter pieces of this rank's master shards and optimizer state (padding dropped). */
  stateDict(): DataParallelState {
    return { tensors: shardedPieces(this.units, this.optimizer, this.comm.rank), optimizerStep: this.optimizer.state([]).step };
  }

  /** Fills the masters and optimizer state in place, then rebuilds the unsharded parameters. */
  async loadStateDict(fill: (targets: Record<string, FlatPiece>) => Promise<{ optimizerStep: number }>): Promise<void> {
    const { optimizerStep } = await fill(this.stateDict().tensors);
    this.optimizer.loadState({ step: optimizerStep });
    await this.#publish();
  }

  /** Brings the unsharded parameters of stages 1-2 up to date with the masters. */
  async #publish(): Promise<void> {
    if (this.#o.stage === 3) return; // gathered from the masters before the next forward
    await Promise.all(this.units.map((u) => {
      if (!this.#half) return this.comm.allGather(u.master, u.full!);
      const shard = new Uint16Array(u.shard);
      toHalf(u.master, shard, this.#half);
      return this.comm.allGather(shard, u.full!, { dtype: this.#half });
    }));
  }

  memory(): MemoryReport {
    let params = 0;
    let grads = 0;
    for (const u of this.units) {
      params += u.master.byteLength + (this.#o.stage < 3 ? u.full!.byteLength : 0);
      grads += u.gradShard.byteLength + (this.#o.stage === 1 ? u.grad!.byteLength : 0);
    }
    return { params, grads, optimizer: this.optimizer.stateBytes(), peakTransient: this.#peak };
  }

  /** Full, unpadded parameter values (a collective: every rank must call it). */
  async gatherParams(): Promise<Float32Array[]> {
    const out: Float32Array[] = [];
    for (const u of this.units) {
      const full = new Float32Array(u.padded);
      await this.comm.allGather(u.master, full);
      u.params.forEach((p, i) => out.push(full.slice(u.offsets[i], u.offsets[i]! + p.size)));
    }
    return out;
  }

  #bindParams(u: Unit, flat: Float32Array): void {
    u.params.forEach((p, i) => (p.data = flat === EMPTY ? EMPTY : flat.subarray(u.offsets[i], u.offsets[i]! + p.size)));
  }

  #bindGrads(u: Unit, flat: Float32Array): void {
    u.params.forEach((p, i) => (p.grad = flat === EMPTY ? EMPTY : flat.subarray(u.offsets[i], u.offsets[i]! + p.size)));
  }

  #grow(bytes: number): void {
    this.#transient += bytes;
    this.#peak = Math.max(this.#peak, this.#transient);
  }
}
