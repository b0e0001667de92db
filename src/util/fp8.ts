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
  max: number;
}
const E4M3: Format = { mantissa: 3, bias: 7, ieee: false, max: 448 };
const E5M2: Format = { mantissa: 2, bias: 15, ieee: true, max: 57344 };

function decode(bits: number, f: Format): number {
  const sign = bits & 0x80 ? -1 : 1;
  const expMax = (1 << (7 - f.mantissa)) - 1;
  const exp = (bits >> f.mantissa) & expMax;
  const frac = bits & ((1 << f.mantissa) - 1);
  if (f.ieee && exp === expMax) return frac ? NaN : sign * Infinity;
  if (!f.ieee && exp === expMax && frac === (1 << f.mantissa) - 1) return NaN;
  if (exp === 0) return sign * frac * 2 ** (1 - f.bias - f.mantissa);
  return sign * (1 + frac / (1 << f.mantissa)) * 2 ** (exp - f.bias);
}

function encode(value: number, f: Format): number {
  if (Number.isNaN(value)) return 0x7f;
  const sign = value < 0 || Object.is(value, -0) ? 0x80 : 0;
  const a = Math.min(Math.abs(value), f.max); // saturates, infinities included
  // Every code, in increasing order of magnitude, is a candidate: pick the nearest,
  // ties to the even code (fp8 has only 127 magnitudes, so a scan is exact and plain).
  let best = 0;
  let bestErr = Infinity;
  for (let code = 0; code < 0x80; code++) {
    const v = decode(code, f);
    if (!Number.isFinite(v)) continue;
    const err = Math.abs(v - a);
    if (err < bestErr || (err === bestErr && (code & 1) === 0)) {
      best = code;
      bestErr = err;
    }
  }
  return sign | best;
}

export function fp8e4m3ToFloat(bits: number): number {
  return decode(bits, E4M3);
}
export function floatToFp8e4m3(value: number): number {
  return encode(value, E4M3);
}
export function fp8e5m2ToFloat(bits: number): number {
  return decode(bits, E5M2);
}
export function floatToFp8e5m2(value: number): number {
  return encode(value, E5M2);
}
