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
 * The flat layout is this rank's parameters (its stage, its TP shard) end to end,
 * padded to a multiple of dp. Checkpoints still see per-parameter state: the
 * shards are gathered over dp first, so a checkpoint does not depend on zero.
 */
import type { Communicator } from '../comm/communicator.js';
import type { Param } from '../models/tiny-lm/tiny-lm.js';
import type { Optimizer } from '../runtime/index.js';

export type ZeroStage = 0 | 1 | 2 | 3;

const RELEASED = new Float32Array(0);

export class DataParallelOptimizer {
  readonly #n: number;
  readonly #shard: number;

  /** counted(p): whether p's elements count toward the global norm on this rank (TP-replicated ones on tp rank 0 only). */
  constructor(readonly dp: Communicator, readonly optimizer: Optimizer, readonly zero: ZeroStage, readonly params: readonly Param[],
    readonly counted: (p: Param) => boolean) {
    this.#n = params.reduce((a, p) => a + p.size, 0);
    this.#shard = Math.ceil(this.#n / dp.size);
    if (zero === 3) {
      this.#paramShard = this.#flat((p) => p.data).slice(dp.rank * this.#shard, (dp.rank + 1) * this.#shard);
      for (const p of params) p.data = RELEASED;
    }
  }

  /** ZeRO-3: this replica's 1/dp of the flat parameters, the only copy kept between steps. */
  #paramShard: Float32Array | null = null;

  /** Parameter elements this rank holds now (ZeRO-3 between steps: its shard only). */
  get residentParamElements(): number {
    return this.#paramShard && this.params.every((p) => p.data.length === 0) ? this.#paramShard.length : this.#n;
  }

  /** Float32 elements allocated now for parameters, gradients (the model's and the reduced shard) and optimizer state. */
  heldElements(): { params: number; grads: number; optimizer: number } {
    const sum = (xs: Iterable<Float32Array>) => [...xs].reduce((a, x) => a + x.length, 0);
    const slots = this.zero === 0 ? this.params.map((p) => ({ key: p.name, size: p.size })) : [{ key: 'flat', size: this.#shard }];
    const model = sum(this.params.map((p) => p.data));
    return {
      params: model + (this.#paramShard?.length ?? 0),
      grads: sum(this.params.map((p) => p.grad)) + (this.#gradShard?.length ?? 0),
      optimizer: sum(Object.values(this.optimizer.state(slots).tensors)),
    };
  }

  /**
   * Before the step's forward: zeroed gradients (ZeRO-2/3 allocate them again, they
   * were dropped after the last reduce) and, under ZeRO-3, the full parameters of
   * this rank's stage all-gathered back into the model (collective over dp).
   */
  async gather(): Promise<void> {
    if (this.#paramShard) {
      const flat = new Float32Array(this.#shard * this.dp.size);
      if (this.dp.size > 1) await this.dp.allGather(this.#paramShard, flat);
      else flat.set(this.#paramShard);
      let o = 0;
      for (const p of this.params) (p.data = flat.subarray(o, o + p.size)), (o += p.size);
    }
    for (const p of this.params) {
      if (p.grad.length === p.size) p.grad.fill(0);
      else p.grad = new Float32Array(p.size);
    }
  }

  /** Drops what this stage keeps only during a step: ZeRO-2/3 the model's gradients, ZeRO-3 the gathered parameters too. */
  reshard(): void {
    if (this.zero >= 2) for (const p of this.params) p.grad = RELEASED;
    if (this.#paramShard) for (const p of this.params) p.data = RELEASED;
  }

  /** This replica's part of the flat layout: [lo, hi). */
  get #range(): [number, number] {
    const lo = Math.min(this.dp.rank * this.#shard, this.#n);
    return [lo, Math.min(lo + this.#shard, this.#n)];
  }

  /**
   * Reduces the gradients over dp and returns the sum of squares of the reduced
   * gradient's counted elements (over all of dp: the caller adds tp and pp).
   */
  async reduce(): Promise<number> {
    const { dp, params } = this;
    const flat = this.#flat((p) => p.grad);
    if (this.zero >= 2 && dp.size > 1) {
      this.#gradShard = new Float32Array(this.#shard);
      await dp.reduceScatter(flat, this.#gradShard, { op: 'sum' });
    } else {
      if (dp.size > 1) await dp.allReduce(flat, { op: 'sum' });
      this.#gradShard = flat.subarray(this.dp.rank * this.#shard, (this.dp.rank + 1) * this.#shard);
      if (this.zero === 0) {
        scatter(flat, params.map((p) => p.grad));
        return params.reduce((a, p) => a + (this.counted(p) ? sumSq(p.grad) : 0), 0);
      }
    }
    if (this.zero >= 2) this.reshard();
    // Sharded: each replica squares its own slice, the slices add up over dp.
    const [lo, hi] = this.#range;
    const sq = new Float64Array([this.#overlaps(lo, hi).reduce((a, [p, from, to]) => a + (this.counted(p) ? sumSq(this.#gradShard!.subarray(from - lo, to - lo)) : 0), 0)]);
    if (dp.size > 1) await dp.allReduce(sq, { op: 'sum' });
    return sq[0]!;
  }

  #gradShard: Float32Array | null = null;

  /** Scales the reduced gradients by `scale` (clipping) and steps. */
  async step(scale: number): Promise<void> {
    const { params, optimizer } = this;
    const g = this.#gradShard!;
    this.#gradShard = null; // the reduced gradient (or the flat copy it is part of) is not kept past the step
    if (this.zero === 0) {
      if (scale !== 1) for (const p of params) for (let i = 0; i < p.size; i++) p.grad[i] = p.grad[i]! * scale;
      optimizer.step(params.map((p) => ({ key: p.name, param: p.data, grad: p.grad })));
      return;
    }
    if (scale !== 1) for (let i = 0; i < g.length; i++) g[i] = g[i]! * scale;
    if (this.#paramShard) return optimizer.step([{ key: 'flat', param: this.#paramShard, grad: g }]);
    const flat = this.#flat((p) => p.data);
    const mine = flat.slice(this.dp.rank * this.#shard, (this.dp.rank + 1) * this.#shard);
    optimizer.step([{ key: 'flat', param: mine, grad: g }]);
    if (this.dp.size > 1) await this.dp.allGather(mine, flat);
    else flat.set(mine);
    scatter(flat, params.map((p) => p.data));
  }

  /** Collective over dp: every parameter's optimizer state, full (this rank's TP shard of it), named `${p.name}.${what}`. */
  async fullState(): Promise<Record<string, Float32Array>> {
    if (this.zero === 0) return Object.assign({}, ...this.params.map((p) => this.optimizer.state([{ key: p.name, size: p.size }]).tensors));
    const out: Record<string, Float32Array> = {};
    for (const [name, shard] of Object.entries(this.optimizer.state([{ key: 'flat', size: this.#shard }]).tensors)) {
      const what = name.slice('flat.'.length);
      const flat = new Float32Array(this.#shard * this.dp.size);
      if (this.dp.size > 1) await this.dp.allGather(shard, flat);
      else flat.set(shard);
      let o = 0;
      for (const p of this.params) (out[`${p.name}.${what}`] = flat.slice(o, o + p.size), (o += p.size));
    }
    return out;
  }

  /** Names fullState() gives, without the collective. */
  stateNames(): string[] {
    return this.params.flatMap((p) => this.optimizer.stateKinds().map((w) => `${p.name}.${w}`));
  }

  /** Loads per-parameter state (as fullState() names it) and the step count. */
  loadState(step: number, tensors: Record<string, Float32Array>): void {
    if (this.zero === 0) return this.optimizer.loadState({ step, tensors });
    const whats = new Set(Object.keys(tensors).map((n) => n.slice(n.lastIndexOf('.') + 1)));
    const mine: Record<string, Float32Array> = {};
    for (const what of whats) {
      const flat = new Float32Array(this.#shard * this.dp.size);
      let o = 0;
      for (const p of this.params) (flat.set(tensors[`${p.name}.${what}`]!, o), (o += p.size));
      mine[`flat.${what}`] = flat.slice(this.dp.rank * this.#shard, (this.dp.rank + 1) * this.#shard);
    }
    this.optimizer.loadState({ step, tensors: mine });
  }

  /** Sets the parameters (this rank's full TP shard of its stage, per Param) wherever this stage keeps them. */
  loadParams(data: ReadonlyMap<Param, Float32Array>): void {
    if (!this.#paramShard) {
      for (const p of this.params) p.data.set(data.get(p)!);
      return;
    }
    const flat = new Float32Array(this.#shard * this.dp.size);
    let o = 0;
    for (const p of this.params) (flat.set(data.get(p)!, o), (o += p.size));
    this.#paramShard.set(flat.subarray(this.dp.rank * this.#shard, (this.dp.rank + 1) * this.#shard));
  }

  /** Parameters overlapping flat [lo, hi), with the overlap's flat range. */
  #overlaps(lo: number, hi: number): Array<[Param, number, number]> {
    const out: Array<[Param, number, number]> = [];
    let o = 0;
    for (const p of this.params) {
      const from = Math.max(lo, o), to = Math.min(hi, o + p.size);
      if (from < to) out.push([p, from, to]);
      o += p.size;
    }
    return out;
  }

  #flat(of: (p: Param) => Float32Array): Float32Array {
    const out = new Float32Array(this.#shard * this.dp.size);
    let o = 0;
    for (const p of this.params) (out.set(of(p), o), (o += p.size));
    return out;
  }
}

function sumSq(x: Float32Array): number {
  let s = 0;
  for (const v of x) s += v * v;
  return s;
}

function scatter(flat: Float32Array, into: Float32Array[]): void {
  let o = 0;
  for (const x of into) (x.set(flat.subarray(o, o + x.length)), (o += x.length));
}
