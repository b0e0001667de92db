/**
 * The runtime's CUDA kernels (native/kernels/kernels.cu): fill and verify for the
 * benchmark, float32 <-> bfloat16 / float16 casts and a checksum. Built by nvcc at
 * install time; without it every call fails with ERR_UNAVAILABLE saying so.
 */
import { DTYPE_CODE } from '../dtypes.js';
import { NcclNodeError, fromNative } from '../errors.js';
import { binding } from '../native.js';
import type { DeviceBuffer } from './device-buffer.js';
import { nativeHandle } from '../comm/communicator.js';
import type { Stream } from './stream.js';

async function run<T>(f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (err) {
    throw fromNative(err);
  }
}

/** Element i of rank r: ((i*7 + r*13 + seed) % 31), minus 15 for signed and float dtypes. */
export function fillValue(i: number, rank: number, seed: number, dtype: string): number {
  const v = (i * 7 + rank * 13 + seed) % 31;
  return dtype === 'uint8' || dtype === 'uint32' || dtype === 'uint64' ? v : v - 15;
}

export function fill(buf: DeviceBuffer, rank: number, seed = 0, stream?: Stream): Promise<void> {
  return run(() => binding().kernels.fill(buf[nativeHandle], buf.length, DTYPE_CODE[buf.dtype], rank, seed, stream?.native));
}

/** Number of elements that differ from the sum over `nranks` ranks of fill(). */
export function verify(buf: DeviceBuffer, nranks: number, seed = 0, stream?: Stream): Promise<number> {
  return run(() => binding().kernels.verify(buf[nativeHandle], buf.length, DTYPE_CODE[buf.dtype], nranks, seed, stream?.native));
}

const CASTS: Record<string, number> = { 'float32>bfloat16': 0, 'float32>float16': 1, 'bfloat16>float32': 2, 'float16>float32': 3 };

/** dst = src converted (float32 <-> bfloat16 / float16, round to nearest even). */
export function cast(src: DeviceBuffer, dst: DeviceBuffer, stream?: Stream): Promise<void> {
  const kind = CASTS[`${src.dtype}>${dst.dtype}`];
  if (kind === undefined) {
    return Promise.reject(new NcclNodeError('ERR_INVALID_ARGUMENT', `cast: ${src.dtype} -> ${dst.dtype} is not supported`));
  }
  if (src.length !== dst.length) {
    return Promise.reject(new NcclNodeError('ERR_SIZE_MISMATCH', `cast: ${src.length} elements into ${dst.length}`));
  }
  return run(() => binding().kernels.cast(src[nativeHandle], dst[nativeHandle], kind, src.length, stream?.native));
}

/** Sum over bytes of (byte[i] + 1) * (i + 1), modulo 2^64. */
export function checksum(buf: DeviceBuffer, stream?: Stream): Promise<bigint> {
  return run(() => binding().kernels.checksum(buf[nativeHandle], buf.byteLength, stream?.native));
}
