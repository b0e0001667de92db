/**
 * fp8 held in Uint8Array (OCP 8-bit floats, NCCL's ncclFloat8e4m3 and ncclFloat8e5m2):
 * decoding is exact; encoding rounds to nearest-even and saturates to the largest
 * finite value, as CUDA's __nv_fp8 conversions do (__NV_SATFINITE). Written
 * independently of the native code so tests can hold one to the other.
 *
 * E4M3 ("fn"): bias 7, no infinities, NaN is S.1111.111, largest finite 448.
 * E5M2: bias 15, IEEE-like infinities and NaNs, largest finite 57344.
 */
interface Format {
  mantissa: number;
  bias: number;
  ieee: boolean;
}

/** A format with its 256 decoded values and the largest finite positive code. */
interface Table {
  values: Float64Array;
  maxCode: number;
}

function decodeBits(bits: number, f: Format): number {
  const sign = bits & 0x80 ? -1 : 1;
  const expMax = (1 << (7 - f.mantissa)) - 1;
  const exp = (bits >> f.mantissa) & expMax;
  const frac = bits & ((1 << f.mantissa) - 1);
  if (f.ieee && exp === expMax) return frac ? NaN : sign * Infinity;
  if (!f.ieee && exp === expMax && frac === (1 << f.mantissa) - 1) return NaN;
  if (exp === 0) return sign * frac * 2 ** (1 - f.bias - f.mantissa);
  return sign * (1 + frac / (1 << f.mantissa)) * 2 ** (exp - f.bias);
}

// Decoding is a table lookup, encoding a binary search over it: test references and
// bench data convert millions of elements, and evaluating every code per element
// (a plain scan) costs about 100 us each.
function table(f: Format): Table {
  const values = new Float64Array(256);
  for (let code = 0; code < 256; code++) values[code] = decodeBits(code, f);
  let maxCode = 0;
  while (maxCode < 0x7f && Number.isFinite(values[maxCode + 1]!)) maxCode++;
  return { values, maxCode };
}
const E4M3 = table({ mantissa: 3, bias: 7, ieee: false });
const E5M2 = table({ mantissa: 2, bias: 15, ieee: true });

function encode(value: number, t: Table): number {
  if (Number.isNaN(value)) return 0x7f;
  const sign = value < 0 || Object.is(value, -0) ? 0x80 : 0;
  const v = t.values;
  // Positive codes 0..maxCode increase in magnitude; beyond the largest finite value
  // saturates (infinities included). Find lo = the last code not above the value.
  const a = Math.min(Math.abs(value), v[t.maxCode]!);
  let lo = 0;
  let hi = t.maxCode;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (v[mid]! <= a) lo = mid;
    else hi = mid - 1;
  }
  if (lo === t.maxCode || v[lo] === a) return sign | lo;
  // Nearest of lo and lo + 1, a tie going to the even code.
  const below = a - v[lo]!;
  const above = v[lo + 1]! - a;
  const up = above < below || (above === below && ((lo + 1) & 1) === 0);
  return sign | (up ? lo + 1 : lo);
}

export function fp8e4m3ToFloat(bits: number): number {
  return E4M3.values[bits & 0xff]!;
}
export function floatToFp8e4m3(value: number): number {
  return encode(value, E4M3);
}
export function fp8e5m2ToFloat(bits: number): number {
  return E5M2.values[bits & 0xff]!;
}
export function floatToFp8e5m2(value: number): number {
  return encode(value, E5M2);
}
