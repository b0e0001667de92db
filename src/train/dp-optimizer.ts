/**
 * The data-parallel half of a 3D step: how gradients meet over the dp group and
 * where the optimizer state lives.
 *
 *   zero 0   all-reduce the gradients; every replica steps every parameter
 *   zero 1   all-reduce the gradients; each replica steps 1/dp of the flat
 *            parameters with 1/dp of the optimizer state, then all-gathers them
 *   zero 2   reduce-scatter the gradients instead: each replica only ever holds
 *            the reduced gradient of its own 1/dp (ZeRO-2's saving); the model's
 *            full gradients live from gather() to reduce() only
 *   zero 3   the parameters too: between steps a replica holds only its 1/dp of
 *            them (the model's Param arrays are empty); gather() all-gathers
 *            them before the step and reduce() releases them with the gradients.
 *            One gather per step, not per micro-batch: under a pipeline the
 *            micro-batches would otherwise each gather the stage again
 *            (TorchTitan's FSDP with PP keeps parameters unsharded after forward
 *            for the same reason).
 *
 * Hybrid sharding (HSDP): `dp` is then the shard group, and `replicate` the ranks
 * holding the same shard in the other groups. The ZeRO stage applies within the
 * shard group; the reduced gradient of a rank's shard (zero 0: all of it) is then
 * all-reduced over `replicate`, so every replica steps with the sum over all of
 * data parallel while holding only 1/dp of the state. The norm's squares still add
 * up over the shard group only: the replicas of a shard hold the same values.
 *
 * The flat layout is this rank's parameters (its stage, its TP shard) end to end,
 * padded to a multiple of dp. Checkpoints still see per-parameter state: the
 * shards are gathered over dp first, so a checkpoint does not depend on zero.
 *
 * Written once over the runtime's Storage (runtime/storage.ts): hostStorage keeps
 * the parameters, gradients and optimizer state in typed arrays over Gloo,
 * deviceStorage in DeviceBuffers over NCCL, where the copies, reductions, sums of
 * squares, clipping and the optimizer step are device collectives and kernels
 * with the host loops' arithmetic. The checkpoint methods read the host optimizer
 * and work on the host storage only.
 */
import type { Communicator } from '../comm/communicator.js';
import { NcclNodeError } from '../errors.js';
import type { DeviceBuffer } from '../gpu/device-buffer.js';
import type { Optimizer } from '../runtime/optim.js';
import { hostStorage, type RuntimeParam, type SlotOptimizer, type Sized, type Storage } from '../runtime/storage.js';

export type ZeroStage = 0 | 1 | 2 | 3;

type Buf = Float32Array | DeviceBuffer;
/** A parameter as the optimizer binds it: a host Param, or a DeviceParam (data null while ZeRO-3 keeps only the shard). */
export type DPParam<B extends Buf = Float32Array> = RuntimeParam<B, B | null>;
/** A storage as the optimizer uses it: hostStorage or deviceStorage. */
export type DPStorage<B extends Buf> = Storage<B, Sized, B | null>;

const SUM = { op: 'sum', dtype: 'float32' } as const;

export class DataParallelOptimizer<B extends Buf = Float32Array> {
  readonly #s: DPStorage<B>;
  readonly #n: number;
  readonly #shard: number;
  #opt!: SlotOptimizer<B>;
  /** ZeRO-3: this replica's 1/dp of the flat parameters, the only copy kept between steps. */
  #paramShard: B | null = null;
  /** ZeRO-3: the stage's parameters gathered for a step (the params are views of it). */
  #gathered: B | null = null;
  /** The reduced gradient of this replica's 1/dp, from reduce() to step(). */
  #gradShard: B | null = null;
  /** The all-reduced flat gradients #gradShard is a view of (ZeRO-1), freed after the step. */
  #reduced: B | null = null;
  /** HSDP: the replicas of this rank's shard (null when there is one). */
  readonly #replicate: Communicator | null;

  /** counted(p): whether p's elements count toward the global norm on this rank (TP-replicated ones on tp rank 0 only). */
  private constructor(storage: DPStorage<B>, readonly dp: Communicator, readonly optimizer: Optimizer, readonly zero: ZeroStage,
    readonly params: readonly DPParam<B>[], readonly counted: (p: DPParam<B>) => boolean, replicate: Communicator | null) {
    this.#s = storage;
    this.#replicate = replicate && replicate.size > 1 ? replicate : null;
    this.#n = params.reduce((a, p) => a + p.size, 0);
    this.#shard = Math.ceil(this.#n / dp.size);
  }

  /**
   * The optimizer over `storage` (ZeRO-3: keeps this replica's shard of the parameters and releases the rest).
   * `replicate`: HSDP's group across shard groups (mesh.get('replicate')); `dp` is then the shard group.
   */
  static async create<B extends Buf>(storage: DPStorage<B>, dp: Communicator, optimizer: Optimizer, zero: ZeroStage,
    params: readonly DPParam<B>[], counted: (p: DPParam<B>) => boolean, replicate: Communicator | null = null): Promise<DataParallelOptimizer<B>> {
    const o = new DataParallelOptimizer(storage, dp, optimizer, zero, params, counted, replicate);
    o.#opt = await storage.optimizer(optimizer, o.#slots());
    if (zero === 3) {
      const flat = await o.#flat((p) => p.data!);
      o.#paramShard = await o.#copyOf(storage.view(flat, dp.rank * o.#shard, o.#shard));
      storage.free(flat);
      for (const p of params) (storage.free(p.data), (p.data = storage.unbound));
    }
    return o;
  }

  #slots(): { key: string; size: number }[] {
    return this.zero === 0 ? this.params.map((p) => ({ key: p.name, size: p.size })) : [{ key: 'flat', size: this.#shard }];
  }

  /** Parameter elements this rank holds now (ZeRO-3 between steps: its shard only). */
  get residentParamElements(): number {
    return this.#paramShard && this.params.every((p) => !p.data?.length) ? this.#paramShard.length : this.#n;
  }

  /** Float32 elements allocated now for parameters, gradients (the model's and the reduced shard) and optimizer state. */
  heldElements(): { params: number; grads: number; optimizer: number } {
    const sum = (xs: Iterable<Sized | null>) => [...xs].reduce((a, x) => a + (x?.length ?? 0), 0);
    return {
      params: sum(this.params.map((p) => p.data)) + (this.#paramShard?.length ?? 0),
      grads: sum(this.params.map((p) => p.grad)) + (this.#gradShard?.length ?? 0),
      optimizer: sum(Object.values(this.#opt.state(this.#slots()).tensors)),
    };
  }

  /**
   * Before the step's forward: zeroed gradients (ZeRO-2/3 allocate them again, they
   * were dropped after the last reduce) and, under ZeRO-3, the full parameters of
   * this rank's stage all-gathered back into the model (collective over dp).
   */
  async gather(): Promise<void> {
    const s = this.#s;
    if (this.#paramShard) {
      const flat = await s.zeros(this.#shard * this.dp.size);
      if (this.dp.size > 1) await s.allGather(this.dp, this.#paramShard, flat, 'float32');
      else await s.copy(flat, this.#paramShard);
      this.#gathered = flat;
      let o = 0;
      for (const p of this.params) (p.data = s.view(flat, o, p.size)), (o += p.size);
    }
    for (const p of this.params) {
      if (p.grad?.length === p.size) await s.zero(p.grad);
      else p.grad = await s.zeros(p.size);
    }
  }

  /** Drops what this stage keeps only during a step: ZeRO-2/3 the model's gradients, ZeRO-3 the gathered parameters too. */
  reshard(): void {
    const s = this.#s;
    if (this.zero >= 2) for (const p of this.params) (s.free(p.grad), (p.grad = s.unbound));
    if (this.#paramShard) {
      for (const p of this.params) p.data = s.unbound;
      s.free(this.#gathered);
      this.#gathered = null;
    }
  }

  /** This replica's part of the flat layout: [lo, hi). */
  get #range(): [number, number] {
    const lo = Math.min(this.dp.rank * this.#shard, this.#n);
    return [lo, Math.min(lo + this.#shard, this.#n)];
  }

  /**
   * Reduces the gradients over dp (HSDP: then this rank's shard over the replicas)
   * and returns the sum of squares of the reduced gradient's counted elements (over
   * all of dp: the caller adds tp and pp).
   */
  async reduce(): Promise<number> {
    const { dp, params } = this;
    const s = this.#s;
    const rep = this.#replicate;
    const flat = await this.#flat((p) => p.grad!);
    if (this.zero >= 2 && dp.size > 1) {
      this.#gradShard = await s.zeros(this.#shard);
      await s.reduceScatter(dp, flat, this.#gradShard, SUM);
      s.free(flat);
      if (rep) await s.allReduce(rep, this.#gradShard, SUM);
    } else {
      if (dp.size > 1) await s.allReduce(dp, flat, SUM);
      if (this.zero === 0) {
        if (rep) await s.allReduce(rep, flat, SUM);
        await this.#scatter(flat, (p) => p.grad!);
        s.free(flat);
        return s.sumSquares(params.filter((p) => this.counted(p)).map((p) => p.grad!));
      }
      this.#reduced = flat;
      this.#gradShard = s.view(flat, dp.rank * this.#shard, this.#shard);
      // Only this rank's shard is stepped: the rest of the flat gradient need not cross replicas.
      if (rep) await s.allReduce(rep, this.#gradShard, SUM);
    }
    if (this.zero >= 2) this.reshard();
    // Sharded: each replica squares its own slice, the slices add up over dp.
    const [lo, hi] = this.#range;
    const mine = this.#overlaps(lo, hi).filter(([p]) => this.counted(p)).map(([, from, to]) => s.view(this.#gradShard!, from - lo, to - from));
    return s.allReduceScalar(dp, await s.sumSquares(mine));
  }

  /** Scales the reduced gradients by `scale` (clipping) and steps. */
  async step(scale: number): Promise<void> {
    const { params, dp } = this;
    const s = this.#s;
    const g = this.#gradShard!;
    this.#gradShard = null; // the reduced gradient (or the flat copy it is part of) is not kept past the step
    if (this.zero === 0) {
      if (scale !== 1) await s.scaleBy(params.map((p) => p.grad!), scale);
      await this.#opt.step(params.map((p) => ({ key: p.name, param: p.data!, grad: p.grad! })));
      return;
    }
    if (scale !== 1) await s.scaleBy([g], scale);
    if (this.#paramShard) {
      await this.#opt.step([{ key: 'flat', param: this.#paramShard, grad: g }]);
    } else {
      const flat = await this.#flat((p) => p.data!);
      const mine = await this.#copyOf(s.view(flat, dp.rank * this.#shard, this.#shard));
      await this.#opt.step([{ key: 'flat', param: mine, grad: g }]);
      if (dp.size > 1) await s.allGather(dp, mine, flat, 'float32');
      else await s.copy(flat, mine);
      await this.#scatter(flat, (p) => p.data!);
      s.free(flat);
      s.free(mine);
    }
    s.free(this.#reduced ?? g);
    this.#reduced = null;
  }

  /** The host storage's optimizer, which the checkpoint methods read and write directly. */
  #host(what: string): { params: readonly DPParam<Float32Array>[]; paramShard: Float32Array | null } {
    if ((this.#s as unknown) !== hostStorage) {
      throw new NcclNodeError('ERR_UNAVAILABLE', `DataParallelOptimizer.${what}: checkpoints are read and written from the host storage; this optimizer keeps its state on the device`);
    }
    return { params: this.params as readonly DPParam<Float32Array>[], paramShard: this.#paramShard as Float32Array | null };
  }

  /** Collective over dp: every parameter's optimizer state, full (this rank's TP shard of it), named `${p.name}.${what}`. */
  async fullState(): Promise<Record<string, Float32Array>> {
    const { params } = this.#host('fullState');
    if (this.zero === 0) return Object.assign({}, ...params.map((p) => this.optimizer.state([{ key: p.name, size: p.size }]).tensors));
    const out: Record<string, Float32Array> = {};
    for (const [name, shard] of Object.entries(this.optimizer.state([{ key: 'flat', size: this.#shard }]).tensors)) {
      const what = name.slice('flat.'.length);
      const flat = new Float32Array(this.#shard * this.dp.size);
      if (this.dp.size > 1) await this.dp.allGather(shard, flat);
      else flat.set(shard);
      let o = 0;
      for (const p of params) (out[`${p.name}.${what}`] = flat.slice(o, o + p.size), (o += p.size));
    }
    return out;
  }

  /** Names fullState() gives, without the collective. */
  stateNames(): string[] {
    return this.params.flatMap((p) => this.optimizer.stateKinds().map((w) => `${p.name}.${w}`));
  }

  /** Loads per-parameter state (as fullState() names it) and the step count. */
  loadState(step: number, tensors: Record<string, Float32Array>): void {
    const { params } = this.#host('loadState');
    if (this.zero === 0) return this.optimizer.loadState({ step, tensors });
    const whats = new Set(Object.keys(tensors).map((n) => n.slice(n.lastIndexOf('.') + 1)));
    const mine: Record<string, Float32Array> = {};
    for (const what of whats) {
      const flat = new Float32Array(this.#shard * this.dp.size);
      let o = 0;
      for (const p of params) (flat.set(tensors[`${p.name}.${what}`]!, o), (o += p.size));
      mine[`flat.${what}`] = flat.slice(this.dp.rank * this.#shard, (this.dp.rank + 1) * this.#shard);
    }
    this.optimizer.loadState({ step, tensors: mine });
  }

  /** Sets the parameters (this rank's full TP shard of its stage, per Param) wherever this stage keeps them. */
  loadParams(data: ReadonlyMap<DPParam<B>, Float32Array>): void {
    const { params, paramShard } = this.#host('loadParams');
    const of = (p: DPParam<Float32Array>) => data.get(p as unknown as DPParam<B>)!;
    if (!paramShard) {
      for (const p of params) p.data!.set(of(p));
      return;
    }
    const flat = new Float32Array(this.#shard * this.dp.size);
    let o = 0;
    for (const p of params) (flat.set(of(p), o), (o += p.size));
    paramShard.set(flat.subarray(this.dp.rank * this.#shard, (this.dp.rank + 1) * this.#shard));
  }

  /** Parameters overlapping flat [lo, hi), with the overlap's flat range. */
  #overlaps(lo: number, hi: number): Array<[DPParam<B>, number, number]> {
    const out: Array<[DPParam<B>, number, number]> = [];
    let o = 0;
    for (const p of this.params) {
      const from = Math.max(lo, o), to = Math.min(hi, o + p.size);
      if (from < to) out.push([p, from, to]);
      o += p.size;
    }
    return out;
  }

  /** The params' `of` end to end in one zero-padded buffer of the flat layout. */
  async #flat(of: (p: DPParam<B>) => B): Promise<B> {
    const out = await this.#s.zeros(this.#shard * this.dp.size);
    let o = 0;
    for (const p of this.params) (await this.#s.copy(this.#s.view(out, o, p.size), of(p)), (o += p.size));
    return out;
  }

  /** The inverse of #flat: each param's `into` from its range of the flat layout. */
  async #scatter(flat: B, into: (p: DPParam<B>) => B): Promise<void> {
    let o = 0;
    for (const p of this.params) (await this.#s.copy(into(p), this.#s.view(flat, o, p.size)), (o += p.size));
  }

  async #copyOf(src: B): Promise<B> {
    const out = await this.#s.zeros(src.length);
    await this.#s.copy(out, src);
    return out;
  }
}
