/** Counts and bandwidth of every collective against nccl-tests' GetCollByteCount/GetBw. */
import { describe, expect, it } from 'vitest';
import { COLLECTIVES, findCollective } from '../../src/nccl-tests/collectives/index.js';

// [name, busbw factor(n), algbw bytes(count, ts, n)] straight from nccl-tests' src/*.cu.
const SPEC: Array<[string, (n: number) => number, (c: number, ts: number, n: number) => number]> = [
  ['all_reduce', (n) => (2 * (n - 1)) / n, (c, ts) => c * ts],
  ['all_gather', (n) => (n - 1) / n, (c, ts, n) => c * ts * n],
  ['broadcast', () => 1, (c, ts) => c * ts],
  ['reduce_scatter', (n) => (n - 1) / n, (c, ts, n) => c * ts * n],
  ['reduce', () => 1, (c, ts) => c * ts],
  ['alltoall', (n) => (n - 1) / n, (c, ts, n) => c * ts * n],
  ['gather', (n) => (n - 1) / n, (c, ts, n) => c * ts * n],
  ['scatter', (n) => (n - 1) / n, (c, ts, n) => c * ts * n],
  ['sendrecv', () => 1, (c, ts) => c * ts],
  ['hypercube', () => 1, (c, ts, n) => c * ts * (n - 1)],
];

describe('busbw arithmetic', () => {
  it('covers all ten collectives', () => {
    expect(COLLECTIVES.map((c) => c.name).sort()).toEqual(SPEC.map((s) => s[0]).sort());
  });
  for (const [name, factor, bytes] of SPEC) {
    it(`${name}: algbw = S/t/1e9, busbw = algbw x factor`, () => {
      const c = findCollective(`${name}_perf`)!;
      for (const n of [1, 2, 4, 8, 16]) {
        const { algBw, busBw } = c.bw(1 << 20, 4, 1e-3, n);
        expect(algBw).toBeCloseTo(bytes(1 << 20, 4, n) / 1e9 / 1e-3, 9);
        expect(busBw).toBeCloseTo(algBw * factor(n), 9);
      }
    });
  }
  it('all_reduce 8 ranks, 1 GiB in 10 ms: algbw 107.37, busbw 187.9', () => {
    const { algBw, busBw } = findCollective('all_reduce')!.bw(2 ** 28, 4, 0.01, 8);
    expect(algBw.toFixed(2)).toBe('107.37');
    expect(busBw.toFixed(2)).toBe('187.90');
  });
});

describe('element counts (size and count columns)', () => {
  it('per-rank collectives round down to 16-byte blocks', () => {
    // all_gather_perf -b 1000 at 4 ranks, float: count 250/4 = 62 -> 60 per rank, size 960.
    const ag = findCollective('all_gather')!.counts(250, 4, 4);
    expect(ag).toEqual({ sendCount: 60, recvCount: 240, paramCount: 60, sendInplaceOffset: 60, recvInplaceOffset: 0 });
    const rs = findCollective('reduce_scatter')!.counts(250, 4, 4);
    expect(rs).toEqual({ sendCount: 240, recvCount: 60, paramCount: 60, sendInplaceOffset: 0, recvInplaceOffset: 60 });
    expect(findCollective('alltoall')!.counts(250, 4, 4)).toMatchObject({ sendCount: 240, recvCount: 240, paramCount: 60 });
    expect(findCollective('gather')!.counts(250, 4, 4)).toMatchObject({ sendCount: 60, recvCount: 240, sendInplaceOffset: 60 });
    expect(findCollective('scatter')!.counts(250, 4, 4)).toMatchObject({ sendCount: 240, recvCount: 60, recvInplaceOffset: 60 });
    expect(findCollective('hypercube')!.counts(250, 8, 4)).toMatchObject({ paramCount: 62, recvCount: 248 });
    // int8: blocks of 16 elements.
    expect(findCollective('all_gather')!.counts(100, 1, 2).paramCount).toBe(48);
  });
  it('whole-buffer collectives keep the count', () => {
    for (const n of ['all_reduce', 'broadcast', 'reduce', 'sendrecv']) {
      expect(findCollective(n)!.counts(7, 4, 4)).toEqual({ sendCount: 7, recvCount: 7, paramCount: 7, sendInplaceOffset: 0, recvInplaceOffset: 0 });
    }
  });
  it('accepts nccl-tests binary names', () => {
    expect(findCollective('all_reduce_perf')?.name).toBe('all_reduce');
    expect(findCollective('alltoall_perf_mpi')?.name).toBe('alltoall');
    expect(findCollective('reduce-scatter')?.name).toBe('reduce_scatter');
    expect(findCollective('alltoallv')).toBeUndefined();
  });
});
