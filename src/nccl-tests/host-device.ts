/**
 * BenchDevice for host memory (the Gloo backend): ArrayBuffers, TypedArray views,
 * and the verifiable data of verifiable.ts made and checked by the addon on native
 * threads (the same bits as the JS generators, which stay the reference and cover
 * what the native path does not: fp8). The NCCL path supplies its own BenchDevice
 * with device buffers and the GPU kernels.
 */
import type { Buffer } from '../comm/communicator.js';
import { DTYPE_BYTES, DTYPE_CODE, REDUCE_OP_CODE, arrayTypeOf, type DType, type HostArray } from '../dtypes.js';
import { binding } from '../native.js';
import type { BenchDevice, Slab } from './collective.js';
import { countWrong, prepareExpected, prepareInput, VERIFIABLE_DTYPES, type GenOp } from './verifiable.js';

const host = (b: Buffer) => b as HostArray;
const NIL = 5;
const opCode = (op: GenOp) => (op === 'nil' ? NIL : REDUCE_OP_CODE[op]);
const native = (dtype: DType) => VERIFIABLE_DTYPES.includes(dtype) && DTYPE_CODE[dtype] < 10;

export const hostDevice: BenchDevice = {
  alloc: (bytes) => new ArrayBuffer(bytes),
  slab(mem, byteOffset, dtype: DType): Slab {
    const Ctor = arrayTypeOf(dtype);
    const size = DTYPE_BYTES[dtype];
    return { at: (offset, count) => new Ctor(mem as ArrayBuffer, byteOffset + offset * size, count) };
  },
  slice(buf, offset, count) {
    const b = host(buf);
    const Ctor = b.constructor as new (ab: ArrayBufferLike, off: number, n: number) => HostArray;
    return new Ctor(b.buffer, b.byteOffset + offset * b.BYTES_PER_ELEMENT, count);
  },
  zero: (buf) => void new Uint8Array(host(buf).buffer, host(buf).byteOffset, host(buf).byteLength).fill(0),
  copy(dst, src) {
    const d = host(dst);
    const s = host(src);
    new Uint8Array(d.buffer, d.byteOffset, d.byteLength).set(new Uint8Array(s.buffer, s.byteOffset, s.byteLength));
  },
  prepareInput: (buf, dtype, op, n, rank, seed, offset) => native(dtype)
    ? binding().verifiablePrepareHost(host(buf), DTYPE_CODE[dtype], opCode(op), n, rank, seed, offset)
    : prepareInput(host(buf), dtype, op, n, rank, seed, offset),
  prepareExpected: (buf, dtype, op, n, seed, offset) => native(dtype)
    ? binding().verifiablePrepareHost(host(buf), DTYPE_CODE[dtype], opCode(op), n, -1, seed, offset)
    : prepareExpected(host(buf), dtype, op, n, seed, offset),
  countWrong: (a, e, dtype, op) => native(dtype)
    ? binding().verifiableCompareHost(host(a), host(e), DTYPE_CODE[dtype], opCode(op))
    : countWrong(host(a), host(e), dtype, op),
  corrupt(buf) {
    const b = host(buf);
    // The element's top byte: sign/exponent for floats, so even avg's 2-ULP tolerance sees it.
    if (b.byteLength > 0) new Uint8Array(b.buffer, b.byteOffset, b.BYTES_PER_ELEMENT)[b.BYTES_PER_ELEMENT - 1]! ^= 0x40;
  },
};
