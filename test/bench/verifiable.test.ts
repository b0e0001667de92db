/** The generators' promise: any reduction order gives exactly the expected bits. */
import { describe, expect, it } from 'vitest';
import { arrayTypeOf, type DType, type ReduceOp } from '../../src/dtypes.js';
import { countWrong, prepareExpected, prepareInput, VERIFIABLE_DTYPES } from '../../src/nccl-tests/verifiable.js';
import { bf16ToFloat, floatToBf16, floatToHalf, halfToFloat } from '../../src/util/half.js';

/** Reduces like a backend would, in the element type, in the given rank order. */
function reduceHost(dtype: DType, op: ReduceOp, inputs: ArrayLike<number | bigint>[], order: number[]) {
  const n = inputs.length;
  const Ctor = arrayTypeOf(dtype);
  const out = new Ctor(inputs[0]!.length) as unknown as { [i: number]: number | bigint; length: number };
  const toNum = (v: number | bigint) => (dtype === 'float16' ? halfToFloat(Number(v)) : dtype === 'bfloat16' ? bf16ToFloat(Number(v)) : Number(v));
  const fromNum = (v: number) => (dtype === 'float16' ? floatToHalf(v) : dtype === 'bfloat16' ? floatToBf16(v) : dtype.endsWith('64') && dtype !== 'float64' ? BigInt(v) : v);
  const round = (v: number) => toNum(fromNum(dtype === 'float32' ? Math.fround(v) : v) as number);
  for (let i = 0; i < out.length; i++) {
    let acc = toNum(inputs[order[0]!]![i]!);
    for (const r of order.slice(1)) {
      const v = toNum(inputs[r]![i]!);
      acc = op === 'sum' || op === 'avg' ? acc + v : op === 'prod' ? acc * v : op === 'min' ? Math.min(acc, v) : Math.max(acc, v);
      if (dtype.startsWith('float') || dtype === 'bfloat16') acc = round(acc);
    }
    if (op === 'avg') acc = dtype.startsWith('float') || dtype === 'bfloat16' ? acc / n : Math.trunc(acc / n);
    out[i] = fromNum(acc);
  }
  return out as unknown as ArrayBufferView;
}

describe('verifiable data', () => {
  for (const dtype of VERIFIABLE_DTYPES) {
    it(`${dtype}: exact results for every op, any order, 2..5 ranks`, () => {
      for (const op of ['sum', 'prod', 'min', 'max', 'avg'] as const) {
        for (const n of [2, 3, 5]) {
          const Ctor = arrayTypeOf(dtype);
          const inputs = [...Array(n).keys()].map((r) => {
            const a = new Ctor(64);
            prepareInput(a, dtype, op, n, r, 7, 100);
            return a as unknown as ArrayLike<number | bigint>;
          });
          const expected = new Ctor(64);
          prepareExpected(expected, dtype, op, n, 7, 100);
          for (const order of [[...Array(n).keys()], [...Array(n).keys()].reverse()]) {
            expect(countWrong(reduceHost(dtype, op, inputs, order), expected, dtype, op), `${op} n=${n}`).toBe(0);
          }
        }
      }
    });
  }
  it('copies: the expected block is the owner-seeded input, and a flipped bit counts', () => {
    const a = new Float32Array(32);
    const e = new Float32Array(32);
    prepareInput(a, 'float32', 'nil', 1, 0, 33 * 3 + 1, 0);
    prepareExpected(e, 'float32', 'nil', 1, 33 * 3 + 1, 0);
    expect(countWrong(a, e, 'float32', 'nil')).toBe(0);
    a[5] = -a[5]!;
    expect(countWrong(a, e, 'float32', 'nil')).toBe(1);
    expect(a.every((v) => Number.isFinite(v))).toBe(true);
  });
  it('float avg allows 2 ULP, not 3', () => {
    const e = new Float32Array([1.5]);
    const a = new Float32Array(1);
    new Uint32Array(a.buffer)[0] = new Uint32Array(e.buffer)[0]! + 2;
    expect(countWrong(a, e, 'float32', 'avg')).toBe(0);
    new Uint32Array(a.buffer)[0] = new Uint32Array(e.buffer)[0]! + 3;
    expect(countWrong(a, e, 'float32', 'avg')).toBe(1);
    expect(countWrong(a, e, 'float32', 'sum')).toBe(1);
  });
});

describe('verifiable data made by the addon on native threads', () => {
  const N = 200_003; // several threads' worth (65,536 elements each at least), not a multiple of anything
  const N2 = 70_001;
  it('equals the JS generators bit for bit: every dtype and op, inputs of every rank and the expected result', async () => {
    const { binding } = await import('../../src/native.js');
    const { DTYPE_CODE, REDUCE_OP_CODE } = await import('../../src/dtypes.js');
    const b = binding();
    for (const dtype of VERIFIABLE_DTYPES) {
      const Ctor = arrayTypeOf(dtype);
      for (const op of ['sum', 'prod', 'max', 'min', 'avg', 'nil'] as const) {
        const code = op === 'nil' ? 5 : REDUCE_OP_CODE[op];
        const seed = (0x9e3779b9 ^ DTYPE_CODE[dtype]) >>> 0, offset = 2 ** 33 + 17; // offsets past 2^32 take the high word path
        // 3 ranks: moduli that are not powers of two; 2 and 8: powers of two, and prod's n <= 8 branch.
        for (const [n, len] of [[3, N], [2, N2], [8, N2]] as const) {
          for (const rank of [0, n - 1, -1]) {
            const js = new Ctor(len), cpp = new Ctor(len);
            if (rank >= 0) prepareInput(js, dtype, op, n, rank, seed, offset);
            else prepareExpected(js, dtype, op, n, seed, offset);
            b.verifiablePrepareHost(cpp, DTYPE_CODE[dtype], code, n, rank, seed, offset);
            expect(Buffer.from(cpp.buffer).equals(Buffer.from(js.buffer)), `${dtype} ${op} n ${n} rank ${rank}`).toBe(true);
          }
        }
        // The native count agrees with countWrong on a damaged copy.
        const want = new Ctor(N), got = new Ctor(N);
        prepareExpected(want, dtype, op, 3, seed, 0);
        got.set(want as never);
        const bytes = new Uint8Array(got.buffer);
        for (let i = 0; i < 5; i++) bytes[(i * 7919 * got.BYTES_PER_ELEMENT) % bytes.length]! ^= 0x40;
        expect(b.verifiableCompareHost(got, want, DTYPE_CODE[dtype], code)).toBe(countWrong(got, want, dtype, op));
      }
    }
    expect(() => b.verifiablePrepareHost(new Float32Array(4), 10, 0, 2, 0, 1, 0)).toThrow(/dtype must be an integer in \[0, 9\]/);
    expect(() => b.verifiableCompareHost(new Float32Array(4), new Float32Array(5), 7, 0)).toThrow(/differ in size/);
  }, 120_000);
});
