/**
 * The order statistics the benchmarks report, defined once so that every table's
 * "median" means the same thing (the mean of the two middle values for an even count).
 */

/** A sorted copy, numerically ascending. */
export function sortedCopy(xs: ArrayLike<number>): Float64Array {
  return Float64Array.from(xs).sort();
}

export function median(xs: ArrayLike<number>): number {
  if (xs.length === 0) throw new RangeError('median of no values');
  const s = sortedCopy(xs);
  const h = s.length >> 1;
  return s.length % 2 ? s[h]! : (s[h - 1]! + s[h]!) / 2;
}

/** The q-quantile (0 <= q <= 1) by nearest rank: a value that was measured. */
export function quantile(xs: ArrayLike<number>, q: number): number {
  if (xs.length === 0) throw new RangeError('quantile of no values');
  const s = sortedCopy(xs);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
}

export function mean(xs: ArrayLike<number>): number {
  if (xs.length === 0) throw new RangeError('mean of no values');
  let sum = 0;
  for (let i = 0; i < xs.length; i++) sum += xs[i]!;
  return sum / xs.length;
}

/** A time for tables and JSON, to three significant digits: sub-µs calls keep theirs, long ones lose only noise. */
export function sig3(x: number): number {
  return Number(x.toPrecision(3));
}
