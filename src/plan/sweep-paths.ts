/**
 * Sweep of recovery path × hot spares × checkpoint interval: simulate() for every
 * combination over the same seeds (the same failure traces), mean ETTR with a 95 %
 * confidence interval, the best interval per path and spare count, and the optimum.
 * Combinations whose paired (same-seed) difference to the optimum is within its 95 %
 * interval are listed as indistinguishable from it.
 */
import { z } from 'zod';
import { NcclNodeError } from '../errors.js';
import { RECOVERY_PATHS, type RecoveryPath } from './recovery-policy.js';
import { parseInput } from './schema.js';
import { simulate, simulateSchema, youngIntervalFor, type SimulateInput } from './simulate.js';
import { meanHalfWidth } from './sweep.js';

/** Multiples of Young's interval tried by default: 1/4 … 16, √2 apart (in-memory and in-process paths rarely need the durable checkpoint, so their optimum lies further out). */
export const PATH_INTERVAL_FACTORS = [0.25, 0.35, 0.5, 0.71, 1, 1.41, 2, 2.83, 4, 5.66, 8, 11.3, 16];

export const pathSweepSchema = z.strictObject({
  paths: z.array(z.enum(RECOVERY_PATHS)).min(1).default(['full-restart', 'in-memory', 'in-process']),
  /** Hot spare counts to try; default the input's hotSpares alone. */
  spares: z.array(z.number().int().nonnegative()).min(1).optional(),
  /** Checkpoint intervals, seconds; default Young's interval × PATH_INTERVAL_FACTORS. */
  intervals: z.array(z.number().positive()).min(1).optional(),
  seeds: z.number().int().min(2).max(1000).default(8),
});
export type PathSweepInput = SimulateInput & z.input<typeof pathSweepSchema>;

export interface PathSweepPoint {
  path: RecoveryPath;
  hotSpares: number;
  intervalSeconds: number;
  meanEttr: number;
  halfWidth: number;
  /** tokensPerSecond × mean ETTR (null without tokensPerSecond). */
  goodputTokensPerSecond: number | null;
  /** Mean failures per rung per run. */
  byRung: Record<string, number>;
}

export interface PathSweepResult {
  seeds: number;
  points: PathSweepPoint[];
  /** Per path and spare count, the interval with the best mean ETTR. */
  best: PathSweepPoint[];
  optimum: PathSweepPoint;
  /** Combinations the simulation cannot tell from the optimum at 95 % (paired by seed). */
  indistinguishable: { path: RecoveryPath; hotSpares: number; intervalSeconds: number }[];
  youngIntervalSeconds: number;
}

export function sweepPaths(input: PathSweepInput): PathSweepResult {
  const { paths, spares, intervals, seeds, ...rest } = input;
  const s = parseInput('sweep', pathSweepSchema, { paths, spares, intervals, seeds });
  const base = parseInput('simulate', simulateSchema, rest);
  if (rest.checkpointIntervalSeconds !== undefined || rest.recoveryPath !== undefined) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'sweep: expected intervals and paths, got checkpointIntervalSeconds or recoveryPath');
  }
  const young = youngIntervalFor(rest);
  const taus = s.intervals ?? PATH_INTERVAL_FACTORS.map((f) => f * young);
  const spareList = s.spares ?? [base.hotSpares];
  const runs: { point: Omit<PathSweepPoint, 'meanEttr' | 'halfWidth' | 'goodputTokensPerSecond' | 'byRung'>; ettr: number[]; byRung: Record<string, number> }[] = [];
  for (const path of s.paths) {
    for (const hotSpares of spareList) {
      for (const tau of taus) {
        const byRung: Record<string, number> = {};
        const ettr = Array.from({ length: s.seeds }, (_, i) => {
          const r = simulate({ ...rest, recoveryPath: path, hotSpares, checkpointIntervalSeconds: tau, seed: base.seed + i });
          for (const [k, n] of Object.entries(r.byRung)) byRung[k] = (byRung[k] ?? 0) + n / s.seeds;
          return r.ettr;
        });
        runs.push({ point: { path, hotSpares, intervalSeconds: tau }, ettr, byRung });
      }
    }
  }
  const points: PathSweepPoint[] = runs.map(({ point, ettr, byRung }) => {
    const { mean, half } = meanHalfWidth(ettr);
    return { ...point, meanEttr: mean, halfWidth: half, goodputTokensPerSecond: base.tokensPerSecond === undefined ? null : base.tokensPerSecond * mean, byRung };
  });
  const argmax = (js: number[]) => js.reduce((b, j) => (points[j]!.meanEttr > points[b]!.meanEttr ? j : b), js[0]!);
  const best: PathSweepPoint[] = [];
  for (const path of s.paths) {
    for (const hotSpares of spareList) {
      best.push(points[argmax(points.flatMap((p, j) => (p.path === path && p.hotSpares === hotSpares ? [j] : [])))]!);
    }
  }
  const top = argmax(points.map((_, j) => j));
  const indistinguishable = runs.filter((r, j) => {
    if (j === top) return true;
    // Same seeds, same failures: the paired difference is far less noisy than either mean.
    const d = meanHalfWidth(runs[top]!.ettr.map((x, i) => x - r.ettr[i]!));
    return d.mean <= d.half;
  }).map((r) => r.point);
  return { seeds: s.seeds, points, best, optimum: points[top]!, indistinguishable, youngIntervalSeconds: young };
}
