/**
 * Sweep of the checkpoint interval: simulate() for each interval over several seeds
 * (the same seeds, hence the same failure traces, for every interval), mean ETTR with
 * a 95 % confidence interval, and the optimum. Intervals whose paired difference to
 * the optimum is within its 95 % interval form `indistinguishable`: the simulation
 * cannot tell them from the best.
 */
import { z } from 'zod';
import { NcclNodeError } from '../errors.js';
import { parseInput } from './schema.js';
import { dalyInterval, simulate, simulateSchema, youngIntervalFor, type SimulateInput } from './simulate.js';

export const sweepSchema = z.strictObject({
  /** Intervals to try, seconds; defaults to Young's interval times 1/4 ... 4 on a log scale. */
  intervals: z.array(z.number().positive()).min(2).optional(),
  seeds: z.number().int().min(2).max(1000).default(8),
});
export type SweepInput = SimulateInput & z.input<typeof sweepSchema>;

export interface SweepPoint { intervalSeconds: number; meanEttr: number; halfWidth: number }
export interface SweepResult {
  points: SweepPoint[];
  optimum: SweepPoint;
  /** Smallest and largest interval not distinguishable from the optimum at 95 %. */
  indistinguishable: { min: number; max: number };
  youngIntervalSeconds: number;
  dalyIntervalSeconds: number;
}

// Student t 97.5 % quantiles for small samples (df 1..30), then the normal 1.96.
const T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.16, 2.145, 2.131,
  2.12, 2.11, 2.101, 2.093, 2.086, 2.08, 2.074, 2.069, 2.064, 2.06, 2.056, 2.052, 2.048, 2.045, 2.042];
const t975 = (df: number) => T975[df - 1] ?? 1.96;

export function meanHalfWidth(xs: readonly number[]): { mean: number; half: number } {
  const n = xs.length;
  const mean = xs.reduce((s, x) => s + x, 0) / n;
  const sd = Math.sqrt(xs.reduce((s, x) => s + (x - mean) ** 2, 0) / (n - 1));
  return { mean, half: (t975(n - 1) * sd) / Math.sqrt(n) };
}

export function sweep(input: SweepInput): SweepResult {
  const { intervals, seeds, ...rest } = input;
  const s = parseInput('sweep', sweepSchema, { intervals, seeds });
  const base = parseInput('simulate', simulateSchema, rest);
  if (rest.checkpointIntervalSeconds !== undefined) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'sweep: expected intervals, got checkpointIntervalSeconds');
  }
  const young = youngIntervalFor(rest);
  const list = s.intervals ?? [0.25, 0.35, 0.5, 0.71, 1, 1.41, 2, 2.83, 4].map((f) => f * young);
  const ettr = list.map((tau) => Array.from({ length: s.seeds }, (_, i) =>
    simulate({ ...rest, checkpointIntervalSeconds: tau, seed: base.seed + i }).ettr));
  const points = list.map((tau, j) => {
    const { mean, half } = meanHalfWidth(ettr[j]!);
    return { intervalSeconds: tau, meanEttr: mean, halfWidth: half };
  });
  let best = 0;
  points.forEach((p, j) => { if (p.meanEttr > points[best]!.meanEttr) best = j; });
  const close = list.filter((_, j) => {
    if (j === best) return true;
    // Paired by seed: same failures, so the difference has far less noise than either.
    const d = meanHalfWidth(ettr[best]!.map((x, i) => x - ettr[j]![i]!));
    return d.mean <= d.half;
  });
  return {
    points, optimum: points[best]!,
    indistinguishable: { min: Math.min(...close), max: Math.max(...close) },
    youngIntervalSeconds: young,
    dalyIntervalSeconds: dalyInterval(base.checkpointSeconds, (young * young) / (2 * base.checkpointSeconds)),
  };
}
