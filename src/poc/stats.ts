/**
 * The statistics behind the POC's gates: percentiles, bootstrap confidence
 * intervals, and the Mann-Whitney U test a canary uses to decide whether a
 * candidate's latencies are worse than the baseline's. Small and exact enough to
 * match scipy (percentiles: numpy's default linear interpolation; Mann-Whitney:
 * scipy.stats.mannwhitneyu's asymptotic method with tie and continuity
 * corrections), which the tests hold them to.
 */
import { NcclNodeError } from '../errors.js';
import { mulberry32 } from '../util/prng.js';

function finite(values: readonly number[], what: string): number[] {
  if (values.length === 0) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${what}: no values`);
  for (const v of values) if (!Number.isFinite(v)) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${what}: values must be finite numbers, received ${v}`);
  return [...values].sort((a, b) => a - b);
}

/** The p-th percentile (0..100) by linear interpolation between closest ranks (numpy's default). */
export function percentile(values: readonly number[], p: number): number {
  if (!(p >= 0 && p <= 100)) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `percentile: p must be in [0, 100], received ${p}`);
  return percentileSorted(finite(values, 'percentile'), p);
}

function percentileSorted(s: readonly number[], p: number): number {
  const h = (s.length - 1) * (p / 100);
  const lo = Math.floor(h);
  const hi = Math.min(lo + 1, s.length - 1);
  return s[lo]! + (h - lo) * (s[hi]! - s[lo]!);
}

export interface Interval { estimate: number; low: number; high: number; confidence: number; resamples: number }

/**
 * Percentile-bootstrap confidence interval of a statistic (by default the p-th
 * percentile): `resamples` resamples with replacement, the statistic of each, and
 * the (1 - confidence) / 2 tails of those.
 */
export function bootstrapInterval(values: readonly number[], statistic: (sorted: readonly number[]) => number,
  o: { confidence?: number; resamples?: number; seed?: number } = {}): Interval {
  const s = finite(values, 'bootstrapInterval');
  const confidence = o.confidence ?? 0.95, resamples = o.resamples ?? 2000;
  const rand = mulberry32(o.seed ?? 1); // seeded: a gate's interval replays
  const stats: number[] = [];
  const r = new Array<number>(s.length);
  for (let k = 0; k < resamples; k++) {
    for (let i = 0; i < s.length; i++) r[i] = s[Math.floor(rand() * s.length)]!;
    r.sort((a, b) => a - b);
    stats.push(statistic(r));
  }
  stats.sort((a, b) => a - b);
  const tail = (1 - confidence) / 2;
  return { estimate: statistic(s), low: percentileSorted(stats, 100 * tail), high: percentileSorted(stats, 100 * (1 - tail)), confidence, resamples };
}

/** A percentile with its bootstrap interval. */
export function percentileInterval(values: readonly number[], p: number, o: { confidence?: number; resamples?: number; seed?: number } = {}): Interval {
  return bootstrapInterval(values, (sorted) => percentileSorted(sorted, p), o);
}

/** Normal upper tail P(Z > z), accurate in relative terms far into the tail (erfc by continued fraction / series). */
export function normalSf(z: number): number {
  return 0.5 * erfc(z / Math.SQRT2);
}

function erfc(x: number): number {
  if (x < 0) return 2 - erfc(-x);
  if (x < 2) {
    // erf by its Taylor series (converges fast for |x| < 2), erfc = 1 - erf.
    let term = x, sum = x;
    for (let n = 1; n < 200; n++) {
      term *= (-x * x) / n;
      const add = term / (2 * n + 1);
      sum += add;
      if (Math.abs(add) < 1e-17 * Math.abs(sum)) break;
    }
    return 1 - (2 / Math.sqrt(Math.PI)) * sum;
  }
  // Continued fraction (Lentz), good relative accuracy in the tail.
  const tiny = 1e-300;
  let f = x, c = x, d = 0;
  for (let n = 1; n < 500; n++) {
    const a = n / 2;
    d = x + a * d;
    d = d === 0 ? tiny : 1 / d;
    c = x + a / c;
    if (c === 0) c = tiny;
    const delta = c * d;
    f *= delta;
    if (Math.abs(delta - 1) < 1e-16) break;
  }
  return Math.exp(-x * x) / Math.sqrt(Math.PI) / f;
}

export interface MannWhitney { u: number; p: number; alternative: 'two-sided' | 'greater' | 'less' }

/**
 * Mann-Whitney U test of x against y: U counts pairs with x above y (ties half);
 * the p-value from the normal approximation with tie correction and continuity
 * correction, as scipy.stats.mannwhitneyu(x, y, method='asymptotic').
 * 'greater': x tends to be larger than y.
 */
export function mannWhitneyU(x: readonly number[], y: readonly number[], alternative: MannWhitney['alternative'] = 'two-sided'): MannWhitney {
  const n1 = x.length, n2 = y.length;
  finite(x, 'mannWhitneyU (x)');
  finite(y, 'mannWhitneyU (y)');
  const all = [...x.map((v) => ({ v, g: 0 })), ...y.map((v) => ({ v, g: 1 }))].sort((a, b) => a.v - b.v);
  const n = all.length;
  let r1 = 0, tieTerm = 0;
  for (let i = 0; i < n;) {
    let j = i;
    while (j + 1 < n && all[j + 1]!.v === all[i]!.v) j++;
    const rank = (i + j + 2) / 2; // average of ranks i+1 .. j+1
    const t = j - i + 1;
    tieTerm += t * t * t - t;
    for (let k = i; k <= j; k++) if (all[k]!.g === 0) r1 += rank;
    i = j + 1;
  }
  const u = r1 - (n1 * (n1 + 1)) / 2;
  const mu = (n1 * n2) / 2;
  const sigma = Math.sqrt(((n1 * n2) / 12) * (n + 1 - tieTerm / (n * (n - 1))));
  if (sigma === 0) return { u, p: 1, alternative };
  const upper = (uu: number) => normalSf((uu - mu - 0.5) / sigma); // P(U >= uu), continuity-corrected
  let p: number;
  if (alternative === 'greater') p = upper(u);
  else if (alternative === 'less') p = upper(n1 * n2 - u);
  else p = Math.min(1, 2 * upper(Math.max(u, n1 * n2 - u)));
  return { u, p: Math.min(1, p), alternative };
}

/**
 * Canary analysis: the candidate passes when it is not worse than the baseline with
 * statistical confidence: latencies not larger (one-sided Mann-Whitney, p >= alpha)
 * and accuracy not lower (one-sided two-proportion z-test, p >= alpha).
 */
export function canary(o: {
  baseline: { latencies: readonly number[]; correct: number; total: number };
  candidate: { latencies: readonly number[]; correct: number; total: number };
  alpha?: number;
}): { pass: boolean; latencyP: number; accuracyP: number; reasons: string[] } {
  const alpha = o.alpha ?? 0.05;
  const latencyP = mannWhitneyU(o.candidate.latencies, o.baseline.latencies, 'greater').p;
  const { correct: c1, total: n1 } = o.candidate, { correct: c0, total: n0 } = o.baseline;
  const pool = (c0 + c1) / (n0 + n1);
  const se = Math.sqrt(pool * (1 - pool) * (1 / n0 + 1 / n1));
  const accuracyP = se === 0 ? (c1 / n1 < c0 / n0 ? 0 : 1) : normalSf((c0 / n0 - c1 / n1) / se);
  const reasons: string[] = [];
  if (latencyP < alpha) reasons.push(`latency is worse than the baseline (Mann-Whitney p = ${latencyP.toPrecision(3)} < ${alpha})`);
  if (accuracyP < alpha) reasons.push(`accuracy is worse than the baseline (${c1}/${n1} vs ${c0}/${n0}, p = ${accuracyP.toPrecision(3)} < ${alpha})`);
  return { pass: reasons.length === 0, latencyP, accuracyP, reasons };
}
