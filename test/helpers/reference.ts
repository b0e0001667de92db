/**
 * Independent reference results for collectives: every rank can compute every
 * other rank's input (deterministic in rank and case), so it can compute what a
 * collective must produce without any communication.
 */
import { createHash } from 'node:crypto';
import { arrayTypeOf, type DType, type HostArray, type ReduceOp } from '../../src/dtypes.js';
import { bf16ToFloat, floatToBf16, floatToHalf, halfToFloat } from '../../src/util/half.js';
import { floatToFp8e4m3, floatToFp8e5m2, fp8e4m3ToFloat, fp8e5m2ToFloat } from '../../src/util/fp8.js';

const FP8: Partial<Record<DType, [encode: (v: number) => number, decode: (b: number) => number]>> = {
  float8e4m3: [floatToFp8e4m3, fp8e4m3ToFloat],
  float8e5m2: [floatToFp8e5m2, fp8e5m2ToFloat],
};

const INT_BITS: Partial<Record<DType, [bits: number, signed: boolean]>> = {
  int8: [8, true],
  uint8: [8, false],
  int32: [32, true],
  uint32: [32, false],
  int64: [64, true],
  uint64: [64, false],
};

export function isInt(dtype: DType): boolean {
  return INT_BITS[dtype] !== undefined;
}

/** Reads element i as a number (16-bit floats decoded) or bigint (64-bit ints). */
export function get(arr: HostArray, dtype: DType, i: number): number | bigint {
  const v = arr[i]!;
  if (dtype === 'bfloat16') return bf16ToFloat(v as number);
  if (dtype === 'float16') return halfToFloat(v as number);
  if (FP8[dtype]) return FP8[dtype]![1](v as number);
  return v;
}

export function encode16(dtype: DType, value: number): number {
  return dtype === 'bfloat16' ? floatToBf16(value) : floatToHalf(value);
}

/**
 * Small integer values (so sums and products of up to 4 ranks are exact in every
 * dtype, including bfloat16; fp8 takes -1..2, exact in both formats) that differ by
 * rank, case and position.
 */
export function valueAt(dtype: DType, rank: number, seed: number, i: number): number {
  return valueOf(!(INT_BITS[dtype] && !INT_BITS[dtype]![1]), (seed * 40503) ^ (rank * 97), i, FP8[dtype] !== undefined);
}

function valueOf(signed: boolean, salt: number, i: number, fp8 = false): number {
  const h = (Math.imul(i, 2654435761) ^ salt) >>> 0;
  if (fp8) return (h % 4) - 1;
  const v = (h % 7) - (signed ? 3 : 0); // -3..3 or 0..6
  return signed ? v : v % 4;
}

export function makeInput(dtype: DType, rank: number, seed: number, n: number): HostArray {
  const Ctor = arrayTypeOf(dtype);
  const arr = new Ctor(n) as HostArray;
  const signed = !(INT_BITS[dtype] && !INT_BITS[dtype]![1]);
  const salt = (seed * 40503) ^ (rank * 97);
  if (arr instanceof BigInt64Array || arr instanceof BigUint64Array) {
    for (let i = 0; i < n; i++) arr[i] = BigInt(valueOf(signed, salt, i));
  } else if (FP8[dtype]) {
    for (let i = 0; i < n; i++) (arr as Uint8Array)[i] = FP8[dtype]![0](valueOf(signed, salt, i, true));
  } else if (dtype === 'float16' || dtype === 'bfloat16') {
    const codes = new Map<number, number>(); // only seven distinct values
    for (let i = 0; i < n; i++) {
      const v = valueOf(signed, salt, i);
      let c = codes.get(v);
      if (c === undefined) codes.set(v, (c = encode16(dtype, v)));
      (arr as Uint16Array)[i] = c;
    }
  } else {
    const a = arr as Float32Array;
    for (let i = 0; i < n; i++) a[i] = valueOf(signed, salt, i);
  }
  return arr;
}

function wrapInt(dtype: DType, v: bigint): bigint {
  const [bits, signed] = INT_BITS[dtype]!;
  return signed ? BigInt.asIntN(bits, v) : BigInt.asUintN(bits, v);
}

/** The expected element of reducing `values` (one per rank) with `op`. */
export function reduceValues(dtype: DType, op: ReduceOp, values: (number | bigint)[]): number | bigint {
  const n = values.length;
  if (isInt(dtype)) {
    const xs = values.map((v) => BigInt(v));
    let acc = xs[0]!;
    for (const x of xs.slice(1)) {
      if (op === 'sum' || op === 'avg') acc = wrapInt(dtype, acc + x);
      else if (op === 'prod') acc = wrapInt(dtype, acc * x);
      else if (op === 'max') acc = x > acc ? x : acc;
      else acc = x < acc ? x : acc;
    }
    if (op === 'avg') acc = acc / BigInt(n); // truncates toward zero, as C++ does
    return dtype === 'int64' || dtype === 'uint64' ? acc : Number(acc);
  }
  const xs = values.map(Number);
  let acc = xs[0]!;
  for (const x of xs.slice(1)) {
    if (op === 'sum' || op === 'avg') acc += x;
    else if (op === 'prod') acc *= x;
    else if (op === 'max') acc = Math.max(acc, x);
    else acc = Math.min(acc, x);
  }
  if (op !== 'avg') return acc;
  // Exact sums; the quotient is computed in the element's compute type and rounded once.
  return dtype === 'float64' ? acc / n : Math.fround(acc / n);
}

/** Stores a reference value into an array of the dtype (rounding as the dtype does). */
export function setValue(arr: HostArray, dtype: DType, i: number, v: number | bigint): void {
  if (arr instanceof BigInt64Array || arr instanceof BigUint64Array) arr[i] = BigInt(v);
  else if (dtype === 'float16' || dtype === 'bfloat16') arr[i] = encode16(dtype, Number(v));
  else if (FP8[dtype]) arr[i] = FP8[dtype]![0](Math.fround(Number(v)));
  else arr[i] = Number(v);
}

/** Indices where two arrays differ bit for bit (the first few). */
export function mismatches(a: HostArray, b: HostArray, limit = 3): { count: number; first: string[] } {
  let count = 0;
  const first: string[] = [];
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) {
    if (a[i] !== b[i]) {
      count++;
      if (first.length < limit) first.push(`[${i}] got ${String(a[i])} expected ${String(b[i])}`);
    }
  }
  return { count, first };
}

/** A zeroed array of `n` elements of `dtype`. */
export function allocOf(dtype: DType, n: number): HostArray {
  return new (arrayTypeOf(dtype))(n) as HostArray;
}

/** First 16 hex digits of the SHA-256 of an array's bytes: ranks compare results by it. */
export function digest(a: ArrayBufferView): string {
  return createHash('sha256').update(new Uint8Array(a.buffer, a.byteOffset, a.byteLength)).digest('hex').slice(0, 16);
}

/** The all-reduce of every rank's makeInput(dtype, rank, seed, n) over `ranks` ranks, reduced in rank order. */
export function allReduceReference(dtype: DType, op: ReduceOp, ranks: number, seed: number, n: number): HostArray {
  const want = allocOf(dtype, n);
  const inputs = Array.from({ length: ranks }, (_, r) => makeInput(dtype, r, seed, n));
  for (let i = 0; i < n; i++) setValue(want, dtype, i, reduceValues(dtype, op, inputs.map((x) => get(x, dtype, i))));
  return want;
}

/**
 * An all-gather case: `want` holds every rank's input in rank order, `out` the output
 * buffer and `input` this rank's input (in place: its block of `out`, already filled).
 */
export function allGatherCase(dtype: DType, ranks: number, rank: number, seed: number, n: number, inPlace: boolean) {
  const want = allocOf(dtype, n * ranks);
  for (let r = 0; r < ranks; r++) want.set(makeInput(dtype, r, seed, n) as never, r * n);
  const out = allocOf(dtype, n * ranks);
  const input = inPlace ? out.subarray(rank * n, (rank + 1) * n) : makeInput(dtype, rank, seed, n);
  if (inPlace) input.set(makeInput(dtype, rank, seed, n) as never);
  return { want, out, input };
}

/**
 * A reduce-scatter case: `input` is this rank's makeInput of ranks x n elements, `out`
 * the output (in place: its block `rank` of `input`), and `want` block `rank` of every
 * rank's input reduced in rank order.
 */
export function reduceScatterCase(dtype: DType, op: ReduceOp, ranks: number, rank: number, seed: number, n: number, inPlace: boolean) {
  const inputs = Array.from({ length: ranks }, (_, r) => makeInput(dtype, r, seed, n * ranks));
  const want = allocOf(dtype, n);
  for (let i = 0; i < n; i++) setValue(want, dtype, i, reduceValues(dtype, op, inputs.map((x) => get(x, dtype, rank * n + i))));
  // This rank's own input, taken after `want` is computed (an in-place call overwrites it).
  const input = inputs[rank]!;
  const out = inPlace ? input.subarray(rank * n, (rank + 1) * n) : allocOf(dtype, n);
  return { want, out, input };
}
