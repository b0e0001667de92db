/**
 * Where DDP and FSDP keep their buffers, and the few operations they do on them.
 * ddp.ts and fsdp.ts are written once against this interface; hostStorage keeps
 * everything in typed arrays over a CPU communicator, deviceStorage (device-storage.ts) in
 * DeviceBuffers over NCCL, with kernels for the arithmetic. Both give the same bits
 * (native/kernels/optim_defs.h follows the host loops), so which one a run uses
 * changes where memory lives, never the result.
 */
import type { Communicator } from '../comm/communicator.js';
import type { DType } from '../dtypes.js';
import { fromHalf, toHalf, type HalfDType } from './cast.js';
import { sumSquares, type Optimizer, type OptimizerState } from './optim.js';
import type { PieceArray } from './state-dict.js';

/** A flat buffer of either storage: host typed arrays and DeviceBuffers both carry these. */
export interface Sized {
  readonly length: number;
  readonly byteLength: number;
}

/**
 * A parameter as the runtime binds it: `data` and `grad` are rebound to views of
 * buckets, gathered units or unsharded gradients, and to the storage's `unbound`
 * value (an empty array on the host, null on the device) while a unit is sharded.
 */
export interface RuntimeParam<B, U> {
  readonly name: string;
  readonly size: number;
  readonly shape?: readonly number[];
  data: B | U;
  grad: B | U;
}

/** One optimizer slot: a whole parameter (DDP) or one rank's shard of a unit (FSDP). */
export interface StorageSlot<B> {
  key: string;
  param: B;
  grad: B;
}

/** The optimizer as the runtime drives it: state per slot key, in this storage. */
export interface SlotOptimizer<B> {
  step(slots: readonly StorageSlot<B>[]): Promise<void>;
  /** The step count and the live state of these slots, named `${key}.${state}`. */
  state(slots: readonly { key: string; size: number }[]): { step: number; tensors: Record<string, B> };
  loadState(s: { step: number }): void;
  stateBytes(): number;
  dispose(): void;
}

export interface CollectiveOptions {
  op: 'sum' | 'avg';
  /** Element type of the buffers (host 16-bit arrays do not say which one they hold). */
  dtype: DType;
  /** Multiply every rank's input by this before summing (NCCL's premulsum); only with op 'sum'. */
  premul?: number | null;
}

/**
 * B: float32 buffers (what parameters, gradients, masters and checkpoint pieces are);
 * R: buffers of any dtype (16-bit compute and communication copies); U: `unbound`.
 */
export interface Storage<B extends PieceArray, R extends Sized = B, U extends B | null = B | null> {
  readonly unbound: U;
  /** `length` zeroed elements (padding must read as zero in norms and updates). */
  zeros(length: number): Promise<B>;
  zerosOf(dtype: DType, length: number): Promise<B | R>;
  /** Elements [start, start + length) of a float32 buffer, sharing its memory. */
  view(buf: B, start: number, length: number): B;
  /** dst[i] = src[i] for the first dst.length elements of src. */
  copy(dst: B, src: B): Promise<void>;
  /** Sets every element to zero; the host does it before returning. */
  zero(buf: B | R): Promise<void>;
  /**
   * A 16-bit copy of `src` for a reduction that divides by `scale` first. The host
   * multiplies while converting; the device casts and returns the factor as `premul`
   * for the collective (NCCL premulsum), which is where the device divides.
   */
  compress(src: B, dtype: HalfDType, scale: number | null): Promise<{ buf: B | R; premul: number | null }>;
  /** dst = src converted between float32 and the 16-bit `dtype` (round to nearest even), either way. */
  cast(src: B | R, dst: B | R, dtype: HalfDType): Promise<void>;
  /** dst += src (float32). */
  addInto(dst: B, src: B): Promise<void>;
  /** buf *= c for every buffer (clipping's rounding). */
  scaleBy(bufs: readonly B[], c: number): Promise<void>;
  /** Σ x² in float64, each buffer in 4096-element chunks, in order (optim.ts sumSquares). */
  sumSquares(bufs: readonly B[]): Promise<number>;
  /** Frees a buffer the runtime allocated (the host leaves it to the garbage collector). */
  free(buf: B | R | null): void;
  /** A float32 buffer's values as a host array (the host returns the buffer itself). */
  toHost(buf: B): Promise<Float32Array>;
  allReduce(comm: Communicator, buf: B | R, o: CollectiveOptions): PromiseLike<unknown>;
  reduceScatter(comm: Communicator, send: B | R, recv: B | R, o: CollectiveOptions): PromiseLike<unknown>;
  allGather(comm: Communicator, send: B | R, recv: B | R, dtype: DType): PromiseLike<unknown>;
  broadcast(comm: Communicator, buf: B | R): PromiseLike<unknown>;
  /** Σ over ranks of one float64 scalar (the global gradient norm's square). */
  allReduceScalar(comm: Communicator, x: number): Promise<number>;
  /** The optimizer's state and step in this storage; `optimizer` gives the hyper-parameters. */
  optimizer(optimizer: Optimizer, slots: readonly { key: string; size: number }[]): Promise<SlotOptimizer<B>>;
}

/**
 * Collectives must be submitted in the same order on every rank. Casts before a
 * collective are awaited, so two launches (a prefetch and a reduce-scatter, two
 * buckets) could otherwise submit in whichever order their casts finish. Every
 * launch goes through one chain: `prepare` runs after the previous launch has
 * submitted, and returns the submitted work, which the chain does not wait for.
 */
export class SubmitQueue {
  #tail: Promise<unknown> = Promise.resolve();

  /** Runs `launch` after every earlier launch has submitted; resolves when its own work is done. */
  run(launch: () => Promise<{ done: PromiseLike<unknown> }>): Promise<void> {
    const submitted = this.#tail.then(launch);
    this.#tail = submitted.catch(() => undefined);
    return submitted.then(({ done }) => done).then(() => undefined);
  }

  /** Resolves once every launch so far has submitted (e.g. before a host-side read-modify-write). */
  drained(): Promise<void> {
    return this.#tail.then(() => undefined);
  }
}

/** The checkpoint-visible optimizer on the host is the caller's own object, stepped in place. */
function hostOptimizer(opt: Optimizer): SlotOptimizer<Float32Array> {
  return {
    step: async (slots) => opt.step([...slots]),
    state: (slots): OptimizerState => opt.state(slots),
    loadState: (s) => opt.loadState(s),
    stateBytes: () => opt.stateBytes(),
    dispose: () => undefined,
  };
}

type HostArray = Float32Array | Uint16Array | Float64Array;
const EMPTY = new Float32Array(0);
const done = Promise.resolve();
const half = (dtype: DType): { dtype?: HalfDType } => (dtype === 'bfloat16' || dtype === 'float16' ? { dtype } : {});

/** Typed arrays over a CPU (Gloo) communicator; every operation finishes before it returns. */
export const hostStorage: Storage<Float32Array, HostArray, Float32Array> = {
  unbound: EMPTY,
  zeros: async (length) => new Float32Array(length),
  zerosOf: async (dtype, length) => {
    if (dtype === 'float32') return new Float32Array(length);
    if (dtype === 'float64') return new Float64Array(length);
    return new Uint16Array(length);
  },
  view: (buf, start, length) => buf.subarray(start, start + length),
  copy: async (dst, src) => dst.set(src.length > dst.length ? src.subarray(0, dst.length) : src),
  zero: (buf) => {
    buf.fill(0);
    return done;
  },
  compress: async (src, dtype, scale) => {
    const buf = new Uint16Array(src.length);
    toHalf(src, buf, dtype, scale ?? 1);
    return { buf, premul: null };
  },
  cast: async (src, dst, dtype) => {
    if (src instanceof Float32Array) toHalf(src, dst as Uint16Array, dtype);
    else fromHalf(src as Uint16Array, dst as Float32Array, dtype);
  },
  addInto: async (dst, src) => {
    for (let i = 0; i < dst.length; i++) dst[i] = dst[i]! + src[i]!;
  },
  scaleBy: async (bufs, c) => {
    for (const b of bufs) for (let i = 0; i < b.length; i++) b[i] = b[i]! * c;
  },
  sumSquares: async (bufs) => sumSquares(bufs),
  free: () => undefined,
  toHost: async (buf) => buf,
  // 16-bit host arrays are Uint16Arrays: only those need their dtype named.
  allReduce: (comm, buf, o) => comm.allReduce(buf, { op: o.op, ...half(o.dtype) }),
  reduceScatter: (comm, send, recv, o) => comm.reduceScatter(send, recv, { op: o.op, ...half(o.dtype) }),
  allGather: (comm, send, recv, dtype) => comm.allGather(send, recv, half(dtype)),
  broadcast: (comm, buf) => comm.broadcast(buf, { root: 0 }),
  allReduceScalar: async (comm, x) => {
    const local = new Float64Array([x]);
    if (comm.size > 1) await comm.allReduce(local, { op: 'sum' });
    return local[0]!;
  },
  optimizer: async (opt) => hostOptimizer(opt),
};
