/**
 * float32 <-> 16-bit conversion of whole arrays for compressed reductions and
 * bf16 compute copies. Inline bit arithmetic (round to nearest even) instead
 * of util/half's per-call helpers: these run on every element of every bucket.
 */
import { floatToHalf, halfToFloat } from '../util/half.js';

export type HalfDType = 'bfloat16' | 'float16';

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** dst[i] = 16-bit(src[i] * scale). */
export function toHalf(src: Float32Array, dst: Uint16Array, dtype: HalfDType, scale = 1): void {
  if (dtype === 'float16') {
    for (let i = 0; i < src.length; i++) dst[i] = floatToHalf(src[i]! * scale);
    return;
  }
  const s32 = new Uint32Array(src.buffer, src.byteOffset, src.length);
  for (let i = 0; i < src.length; i++) {
    let u: number;
    if (scale === 1) u = s32[i]!;
    else {
      f32[0] = src[i]! * scale;
      u = u32[0]!;
    }
    if ((u & 0x7fffffff) > 0x7f800000) dst[i] = ((u >>> 16) | 0x40) & 0xffff; // NaN stays NaN
    else dst[i] = (((u + 0x7fff + ((u >>> 16) & 1)) >>> 0) >>> 16) & 0xffff;
  }
}

/** dst[i] = float(src[i]) (or += when accumulate). */
export function fromHalf(src: Uint16Array, dst: Float32Array, dtype: HalfDType, accumulate = false): void {
  if (dtype === 'float16') {
    for (let i = 0; i < src.length; i++) dst[i] = (accumulate ? dst[i]! : 0) + halfToFloat(src[i]!);
    return;
  }
  for (let i = 0; i < src.length; i++) {
    u32[0] = src[i]! << 16;
    dst[i] = (accumulate ? dst[i]! : 0) + f32[0]!;
  }
}

/** Rounds a float32 array to the nearest bf16/fp16 values, in place (what a 16-bit copy holds). */
export function roundTo(a: Float32Array, dtype: HalfDType): void {
  const tmp = new Uint16Array(a.length);
  toHalf(a, tmp, dtype);
  fromHalf(tmp, a, dtype);
}
