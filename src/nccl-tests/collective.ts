/**
 * What one nccl-tests collective contributes (its src/<name>.cu): element counts,
 * the bandwidth formula, data preparation and the call itself. The common driver
 * (driver.ts) does the rest. Buffers and data preparation go through BenchDevice,
 * so the GPU path only swaps that object.
 */
import type { Buffer, Communicator } from '../comm/communicator.js';
import type { DType, ReduceOp } from '../dtypes.js';
import type { GenOp } from './verifiable.js';

/** getCollByteCount, in elements. */
export interface CollCounts {
  sendCount: number;
  recvCount: number;
  paramCount: number;
  sendInplaceOffset: number;
  recvInplaceOffset: number;
}

export interface Bandwidth {
  algBw: number;
  busBw: number;
}

/** One of the three buffers, seen from a base offset (iteration shift and -u applied). */
export interface Slab {
  /** `count` elements starting `offset` elements in. */
  at(offset: number, count: number): Buffer;
}

/**
 * Where buffers live and how verifiable data gets into them: host memory with JS
 * generators for Gloo; device memory with the GPU issue's kernels for NCCL.
 */
export interface BenchDevice {
  /** Zero-filled memory of `bytes` bytes. */
  alloc(bytes: number): unknown;
  slab(mem: unknown, byteOffset: number, dtype: DType): Slab;
  /** `count` elements of `buf` from element `offset` (no copy). */
  slice(buf: Buffer, offset: number, count: number): Buffer;
  zero(buf: Buffer): void | Promise<void>;
  copy(dst: Buffer, src: Buffer): void | Promise<void>;
  prepareInput(buf: Buffer, dtype: DType, op: GenOp, nranks: number, rank: number, seed: number, offset: number): void | Promise<void>;
  prepareExpected(buf: Buffer, dtype: DType, op: GenOp, nranks: number, seed: number, offset: number): void | Promise<void>;
  countWrong(actual: Buffer, expected: Buffer, dtype: DType, op: GenOp): number | Promise<number>;
  /** Test hook: flips one bit of element 0 (NCCL_NODE_BENCH_CORRUPT). */
  corrupt(buf: Buffer): void | Promise<void>;
}

export interface CollArgs {
  comm: Communicator;
  dev: BenchDevice;
  rank: number;
  nranks: number;
  dtype: DType;
  /** undefined for copies. */
  op: ReduceOp | undefined;
  root: number;
  inPlace: boolean;
  counts: CollCounts;
}

export interface InitArgs extends CollArgs {
  send: Slab;
  recv: Slab;
  expected: Slab;
  /** Seed of this validation pass (nccl-tests' rep). */
  rep: number;
}

export interface RunArgs extends CollArgs {
  /** sendCount elements (in place: inside recv, per sendInplaceOffset). */
  send: Buffer;
  /** recvCount elements (in place: per recvInplaceOffset). */
  recv: Buffer;
}

export interface Collective {
  /** all_reduce, ...; the program name is `${name}_perf`. */
  name: string;
  /** redop column: the op names, "none", or "" (hypercube). */
  redop: 'op' | 'none' | 'empty';
  /** Sweeps roots with -r -1. */
  rooted: boolean;
  /** In-place results are not checked (alltoall, sendrecv): #wrong prints N/A. */
  inPlaceUnchecked?: boolean;
  /** Needs a power-of-two world (hypercube). */
  powerOfTwo?: boolean;
  counts(count: number, eltSize: number, nranks: number): CollCounts;
  bw(count: number, typeSize: number, sec: number, nranks: number): Bandwidth;
  initData(a: InitArgs): Promise<void>;
  /** Queues the operation; resolves when it has completed. */
  run(a: RunArgs): PromiseLike<unknown>;
}

/** nccl-tests rounds per-rank counts down so each block is a multiple of 16 bytes. */
export function perRank(count: number, eltSize: number, nranks: number): number {
  const align = Math.max(1, 16 / eltSize);
  return Math.floor(Math.floor(count / nranks) / align) * align;
}

export function sameCounts(count: number): CollCounts {
  return { sendCount: count, recvCount: count, paramCount: count, sendInplaceOffset: 0, recvInplaceOffset: 0 };
}

export function bandwidth(bytes: number, sec: number, factor: number): Bandwidth {
  const algBw = bytes / 1.0e9 / sec;
  return { algBw, busBw: algBw * factor };
}

/** The op as the data generator sees it. */
export const genOp = (a: CollArgs): GenOp => a.op ?? 'nil';
