import { describe, expect, it } from 'vitest';
import { mean, median, quantile } from '../../bench/stats.js';

// The benchmarks' shared order statistics, against values worked out by hand.
describe('bench/stats', () => {
  it('median: the middle value, or the mean of the two middle ones; input order and type do not matter', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 3, 2])).toBe(2.5);
    expect(median(Float64Array.of(10, -1))).toBe(4.5);
    expect(median([7])).toBe(7);
    // numeric, not lexicographic, order: [2, 10, 100] has median 10 ("100" < "2" as strings)
    expect(median([100, 2, 10])).toBe(10);
  });

  it('quantile by nearest rank returns a measured value', () => {
    const xs = Array.from({ length: 1000 }, (_, i) => 1000 - i); // 1..1000, reversed
    expect(quantile(xs, 0.5)).toBe(500);
    expect(quantile(xs, 0.99)).toBe(990);
    expect(quantile(xs, 0.999)).toBe(999);
    expect(quantile(xs, 1)).toBe(1000);
    expect(quantile(xs, 0)).toBe(1);
    expect(quantile([5, 1], 0.9)).toBe(5);
  });

  it('mean; no values is an error, not NaN', () => {
    expect(mean([1, 2, 3, 6])).toBe(3);
    expect(() => median([])).toThrow(RangeError);
    expect(() => quantile([], 0.5)).toThrow(RangeError);
    expect(() => mean([])).toThrow(RangeError);
  });
});
