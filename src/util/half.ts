/**
 * float16 and bfloat16 held in Uint16Array: conversion to and from numbers with
 * IEEE round-to-nearest-even, written independently of the native code so tests
 * can hold one to the other.
 */
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function bf16ToFloat(bits: number): number {
  u32[0] = (bits & 0xffff) << 16;
  return f32[0]!;
}

export function floatToBf16(value: number): number {
  f32[0] = value;
  const u = u32[0]!;
  if ((u & 0x7fffffff) > 0x7f800000) return ((u >>> 16) | 0x40) & 0xffff;
  const rounded = (u + 0x7fff + ((u >>> 16) & 1)) >>> 0;
  return (rounded >>> 16) & 0xffff;
}

export function halfToFloat(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >> 10) & 0x1f;
  const frac = bits & 0x3ff;
  if (exp === 0) return sign * frac * 2 ** -24;
  if (exp === 0x1f) return frac ? NaN : sign * Infinity;
  return sign * (1 + frac / 1024) * 2 ** (exp - 15);
}

export function floatToHalf(value: number): number {
  f32[0] = value; // round to float32 first, as the native path does
  const x = f32[0]!;
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(x);
  if (Number.isNaN(x)) return 0x7e00;
  if (a === Infinity) return sign | 0x7c00;
  if (a >= 65520) return sign | 0x7c00; // rounds past the largest finite half (65504)
  if (a < 2 ** -14) {
    // subnormal: units of 2^-24, ties to even
    const q = a / 2 ** -24;
    let n = Math.floor(q);
    const r = q - n;
    if (r > 0.5 || (r === 0.5 && n % 2 === 1)) n += 1;
    return sign | n; // n === 1024 becomes the smallest normal, which is right
  }
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e -= 1;
  if (2 ** (e + 1) <= a) e += 1;
  const m = a / 2 ** e - 1; // in [0, 1)
  const q = m * 1024;
  let n = Math.floor(q);
  const r = q - n;
  if (r > 0.5 || (r === 0.5 && n % 2 === 1)) n += 1;
  let exp = e + 15;
  if (n === 1024) {
    n = 0;
    exp += 1;
  }
  if (exp >= 0x1f) return sign | 0x7c00;
  return sign | (exp << 10) | n;
}
