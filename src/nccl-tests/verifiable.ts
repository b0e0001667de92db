/**
 * Host-side verifiable data, after nccl-tests' verifiable/ library: every rank
 * can compute any rank's input from (seed, rank, element index), inputs are chosen
 * so the reduced result is exactly representable whatever the reduction order,
 * and results are compared bit for bit (2 ULP for floating-point avg).
 * The values differ from nccl-tests' (its generator is CUDA); the guarantees match.
 */
import { DTYPES, type DType, type ReduceOp } from '../dtypes.js';
import { floatToBf16, floatToHalf } from '../util/half.js';

/** 'nil' is a copy (gather, broadcast, ...): each rank's data comes from its own seed. */
export type GenOp = ReduceOp | 'nil';

interface Layout {
  bytes: number;
  float: boolean;
  signed: boolean;
  /** Mantissa bits (floats) or value bits (integers). */
  bits: number;
  /** Exponent range used for sums, where k * 2^e with |k| < 2^(bits+1) stays finite. */
  emin: number;
  emax: number;
}

// fp8 is not covered yet (nccl-tests' f8e4m3/f8e5m2 data): the kernels' twins stop at bfloat16.
const LAYOUT: Partial<Record<DType, Layout>> = {
  int8: { bytes: 1, float: false, signed: true, bits: 8, emin: 0, emax: 0 },
  uint8: { bytes: 1, float: false, signed: false, bits: 8, emin: 0, emax: 0 },
  int32: { bytes: 4, float: false, signed: true, bits: 32, emin: 0, emax: 0 },
  uint32: { bytes: 4, float: false, signed: false, bits: 32, emin: 0, emax: 0 },
  int64: { bytes: 8, float: false, signed: true, bits: 64, emin: 0, emax: 0 },
  uint64: { bytes: 8, float: false, signed: false, bits: 64, emin: 0, emax: 0 },
  float16: { bytes: 2, float: true, signed: true, bits: 10, emin: -20, emax: 4 },
  bfloat16: { bytes: 2, float: true, signed: true, bits: 7, emin: -20, emax: 20 },
  float32: { bytes: 4, float: true, signed: true, bits: 23, emin: -30, emax: 30 },
  float64: { bytes: 8, float: true, signed: true, bits: 52, emin: -60, emax: 60 },
};

/** The dtypes the verifiable data covers. */
export const VERIFIABLE_DTYPES: readonly DType[] = DTYPES.filter((d) => LAYOUT[d] !== undefined);

function layoutOf(dtype: DType): Layout {
  const l = LAYOUT[dtype];
  if (!l) throw new Error(`verifiable data does not cover ${dtype}`);
  return l;
}

/** A 32-bit mix of three integers (murmur3-style finaliser). */
export function hash3(a: number, b: number, c: number): number {
  let h = Math.imul((a | 0) ^ 0x9e3779b9, 0x85ebca6b) ^ (b | 0);
  h = Math.imul(h ^ (h >>> 16), 0xc2b2ae35) ^ (c | 0);
  h = Math.imul(h ^ (h >>> 13), 0x27d4eb2d);
  h = Math.imul(h ^ (h >>> 15), 0x165667b1);
  return (h ^ (h >>> 16)) >>> 0;
}

/** A uniform integer in [0, n), n <= 2^53. */
function below(n: number, seed: number, idx: number, salt: number): number {
  const hi = hash3(seed, idx, salt) % 2 ** 21;
  return (hi * 2 ** 32 + hash3(seed, idx, salt + 1)) % n;
}

const rankSeed = (seed: number, rank: number) => hash3(seed, rank, 7);

/** Sum inputs: integers k (times a power of two shared by all ranks for floats) with n*|k| in range. */
function sumInput(l: Layout, n: number, rank: number, seed: number, idx: number): number {
  if (!l.float) {
    const bits = Math.min(l.bits, 52);
    if (l.signed) {
      const half = Math.max(1, Math.floor(2 ** (bits - 1) / n));
      return below(2 * half, rankSeed(seed, rank), idx, 11) - half;
    }
    return below(Math.max(1, Math.floor((2 ** bits - 1) / n)), rankSeed(seed, rank), idx, 11);
  }
  const half = Math.max(1, Math.floor(2 ** l.bits / n)); // |sum| < 2^(bits+1): exact
  const e = l.emin + below(l.emax - l.emin + 1, seed, idx, 13);
  return (below(2 * half, rankSeed(seed, rank), idx, 11) - half) * 2 ** e;
}

/** Product inputs: one rank per element holds a random value, the others +-1 (or +-2). */
function prodInput(l: Layout, n: number, rank: number, seed: number, idx: number): number {
  const chosen = below(n, seed, idx, 17);
  const rs = rankSeed(seed, rank);
  const sign = l.signed && hash3(rs, idx, 19) & 1 ? -1 : 1;
  if (!l.float) {
    if (rank !== chosen) return sign;
    const max = 2 ** (Math.min(l.bits, 52) - (l.signed ? 1 : 0)) - 1;
    return sign * (1 + below(max, seed, idx, 23));
  }
  if (rank !== chosen) return sign * (n <= 8 && hash3(rs, idx, 29) & 1 ? 2 : 1);
  const m = 1 + below(2 ** l.bits, seed, idx, 23) / 2 ** l.bits;
  return sign * m * 2 ** (below(9, seed, idx, 31) - 4);
}

/** Min/max inputs: any finite, non-zero value. */
function anyInput(l: Layout, rank: number, seed: number, idx: number): number {
  const rs = rankSeed(seed, rank);
  if (!l.float) {
    const bits = Math.min(l.bits, 52);
    return below(2 ** bits, rs, idx, 37) - (l.signed ? 2 ** (bits - 1) : 0);
  }
  const m = 1 + below(2 ** l.bits, rs, idx, 41) / 2 ** l.bits;
  const e = l.emin + below(l.emax - l.emin + 1, rs, idx, 43);
  return (hash3(rs, idx, 47) & 1 ? -1 : 1) * m * 2 ** e;
}

export function inputValue(dtype: DType, op: Exclude<GenOp, 'nil'>, n: number, rank: number, seed: number, idx: number): number {
  const l = layoutOf(dtype);
  if (op === 'sum' || op === 'avg') return sumInput(l, n, rank, seed, idx);
  if (op === 'prod') return prodInput(l, n, rank, seed, idx);
  return anyInput(l, rank, seed, idx);
}

export function expectedValue(dtype: DType, op: Exclude<GenOp, 'nil'>, n: number, seed: number, idx: number): number {
  let acc = inputValue(dtype, op, n, 0, seed, idx);
  for (let r = 1; r < n; r++) {
    const v = inputValue(dtype, op, n, r, seed, idx);
    if (op === 'sum' || op === 'avg') acc += v;
    else if (op === 'prod') acc *= v;
    else if (op === 'min') acc = Math.min(acc, v);
    else acc = Math.max(acc, v);
  }
  if (op !== 'avg') return acc;
  return layoutOf(dtype).float ? acc / n : Math.trunc(acc / n); // C integer division
}

/** Unsigned views of the element bits: one word per element, two (lo, hi) for 8-byte types. */
function words(buf: ArrayBufferView, bytes: number): Uint8Array | Uint16Array | Uint32Array {
  const C = bytes === 1 ? Uint8Array : bytes === 2 ? Uint16Array : Uint32Array;
  return new C(buf.buffer as ArrayBuffer, buf.byteOffset, buf.byteLength / C.BYTES_PER_ELEMENT);
}

/** Writes a value (exactly representable by construction, except avg) as the dtype's bits. */
function store(dtype: DType, w: Uint8Array | Uint16Array | Uint32Array, i: number, v: number, buf: ArrayBufferView): void {
  switch (dtype) {
    case 'float16': w[i] = floatToHalf(v); return;
    case 'bfloat16': w[i] = floatToBf16(v); return;
    case 'float32': (buf as Float32Array)[i] = v; return;
    case 'float64': (buf as Float64Array)[i] = v; return;
    case 'int64': case 'uint64':
      w[2 * i] = ((v % 2 ** 32) + 2 ** 32) % 2 ** 32;
      w[2 * i + 1] = Math.floor(v / 2 ** 32) >>> 0;
      return;
    default: (buf as Int32Array)[i] = v;
  }
}

/** Random bits for copies; floats get a finite exponent so NaN payloads never appear. */
function nilBits(l: Layout, w: Uint8Array | Uint16Array | Uint32Array, i: number, seed: number, idx: number): void {
  const h = hash3(seed, idx, 53);
  if (l.bytes === 8) {
    w[2 * i] = hash3(seed, idx, 59);
    w[2 * i + 1] = l.float ? (h & 0x800fffff) | 0x3ff00000 : h;
  } else if (!l.float) w[i] = h;
  else if (l.bytes === 4) w[i] = (h & 0x807fffff) | 0x3f800000;
  else w[i] = l.bits === 10 ? (h & 0x83ff) | 0x3c00 : (h & 0x807f) | 0x3f80;
}

/** Fills `buf` (count elements of dtype) with rank `rank`'s input for elements offset.. */
export function prepareInput(buf: ArrayBufferView, dtype: DType, op: GenOp, n: number, rank: number, seed: number, offset: number): void {
  const l = layoutOf(dtype);
  const w = words(buf, l.bytes);
  const count = buf.byteLength / l.bytes;
  for (let i = 0; i < count; i++) {
    if (op === 'nil') nilBits(l, w, i, seed, offset + i);
    else store(dtype, w, i, inputValue(dtype, op, n, rank, seed, offset + i), buf);
  }
}

/** Fills `buf` with the reduction over all n ranks (or the copy, for 'nil'). */
export function prepareExpected(buf: ArrayBufferView, dtype: DType, op: GenOp, n: number, seed: number, offset: number): void {
  if (op === 'nil') return prepareInput(buf, dtype, op, 1, 0, seed, offset);
  const l = layoutOf(dtype);
  const w = words(buf, l.bytes);
  const count = buf.byteLength / l.bytes;
  for (let i = 0; i < count; i++) store(dtype, w, i, expectedValue(dtype, op, n, seed, offset + i), buf);
}

/**
 * Elements whose bits differ from the expected ones, as unsigned integers of the
 * element width; floating-point avg allows 2 ULP (nccl-tests' tolerance).
 */
export function countWrong(actual: ArrayBufferView, expected: ArrayBufferView, dtype: DType, op: GenOp): number {
  const l = layoutOf(dtype);
  const a = words(actual, l.bytes);
  const e = words(expected, l.bytes);
  const tol = l.float && op === 'avg' ? 2 : 0;
  let wrong = 0;
  if (l.bytes === 8) {
    for (let i = 0; i < a.length; i += 2) {
      if (a[i] === e[i] && a[i + 1] === e[i + 1]) continue;
      const d = Math.abs((a[i + 1]! - e[i + 1]!) * 2 ** 32 + (a[i]! - e[i]!));
      if (d > tol) wrong++;
    }
    return wrong;
  }
  for (let i = 0; i < a.length; i++) if (a[i] !== e[i] && Math.abs(a[i]! - e[i]!) > tol) wrong++;
  return wrong;
}
