/**
 * The runtime's CUDA kernels (native/kernels/kernels.cu): fill and verify for the
 * benchmark, float32 <-> bfloat16 / float16 casts, a checksum, and the training
 * step's arithmetic (accumulate, scale, sum of squares, AdamW, SGD) so no shard
 * leaves the GPU. Built by nvcc at install time; without it every call fails with
 * ERR_UNAVAILABLE saying so.
 */
import { DTYPE_CODE } from '../dtypes.js';
import { NcclNodeError } from '../errors.js';
import { binding, nativeHandle } from '../native.js';
import type { DeviceBuffer } from './device-buffer.js';
import type { Stream } from './stream.js';

/** Calls f so that whatever it throws, the caller gets as a rejection. */
async function run<T>(f: () => Promise<T>): Promise<T> {
  return f();
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

function float32(what: string, ...bufs: (DeviceBuffer | null)[]): void {
  const first = bufs[0]!;
  for (const b of bufs) {
    if (!b) continue;
    if (b.dtype !== 'float32') throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${what}: expected float32 DeviceBuffers, received ${b.dtype}`);
    if (b.length !== first.length) throw new NcclNodeError('ERR_SIZE_MISMATCH', `${what}: buffers of ${first.length} and ${b.length} elements`);
  }
}

/** dst += src (float32, one rounding per element). */
export function add(dst: DeviceBuffer, src: DeviceBuffer, stream?: Stream): Promise<void> {
  return run(async () => {
    float32('add', dst, src);
    return binding().kernels.add(dst[nativeHandle], src[nativeHandle], dst.length, stream?.native);
  });
}

/** buf *= c: each element times c in float64, rounded once to float32 (as the host path). */
export function scale(buf: DeviceBuffer, c: number, stream?: Stream): Promise<void> {
  return run(async () => {
    float32('scale', buf);
    return binding().kernels.scale(buf[nativeHandle], buf.length, c, stream?.native);
  });
}

/**
 * Σ x² in float64, summed in 4096-element chunks and then over the chunks, in order:
 * the same value as sumSquares() of the same data on the host, bit for bit.
 */
export function sumSquares(buf: DeviceBuffer, stream?: Stream): Promise<number> {
  return run(async () => {
    float32('sumSquares', buf);
    return binding().kernels.sumSquares(buf[nativeHandle], buf.length, stream?.native);
  });
}

export interface AdamWHyper { lr: number; beta1: number; beta2: number; eps: number; weightDecay: number; bc1: number; bc2: number }

/** One AdamW step of element-wise state, in place (the host AdamW's arithmetic, bit for bit). */
export function adamw(param: DeviceBuffer, grad: DeviceBuffer, expAvg: DeviceBuffer, expAvgSq: DeviceBuffer, h: AdamWHyper,
  stream?: Stream): Promise<void> {
  return run(async () => {
    float32('adamw', param, grad, expAvg, expAvgSq);
    return binding().kernels.adamw(param[nativeHandle], grad[nativeHandle], expAvg[nativeHandle], expAvgSq[nativeHandle],
      param.length, [h.lr, h.beta1, h.beta2, h.eps, h.weightDecay, h.bc1, h.bc2], stream?.native);
  });
}

/** One SGD step in place; momentumBuffer null for plain SGD (the host SGD's arithmetic, bit for bit). */
export function sgd(param: DeviceBuffer, grad: DeviceBuffer, momentumBuffer: DeviceBuffer | null,
  h: { lr: number; momentum: number; weightDecay: number }, stream?: Stream): Promise<void> {
  return run(async () => {
    float32('sgd', param, grad, momentumBuffer);
    return binding().kernels.sgd(param[nativeHandle], grad[nativeHandle], momentumBuffer ? momentumBuffer[nativeHandle] : null,
      param.length, [h.lr, h.momentum, h.weightDecay], stream?.native);
  });
}
