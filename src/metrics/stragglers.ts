/**
 * Straggler scores: which rank the others wait for, and whether it always does.
 *
 * Input, per step and rank: the step's wall time and, for each collective the rank ran
 * in the step, its sequence number and its wait: from the moment the rank reached the
 * operation (its submission, or the end of the operation before it on the same
 * communicator) to the operation's end (src/comm/flight-record.ts). A collective ends at
 * nearly the same moment on every rank, once the last rank has arrived, so the rank that
 * arrived last waited least, and
 *
 *     lateness(r, op) = max over ranks of wait(op) - wait(r, op)
 *
 * is how much later than the first rank r arrived, from each rank's own clock only (no
 * cross-host clock offset enters). A rank's lateness in a step is the sum over the
 * collectives every rank reported for that step.
 *
 * A rank is late in a step when its lateness is at least max(minLatenessSeconds,
 * lateShare x the median step time of the step). Its score is an EWMA (weight alpha) of
 * lateness / median step time: the share of a step the job spends waiting for it.
 * Over the last `window` steps:
 * - chronic: late in at least chronicShare of them (and at least 3 steps seen);
 * - intermittent: late in two or more, fewer than that;
 * - one-off: late in exactly one (a single spike).
 * The culprit is the highest-scoring chronic (else intermittent) straggler. Victims are
 * the ranks that are not stragglers but whose EWMA wait per step is at least the
 * lateness threshold: their steps are long only because they wait.
 */

export interface StepReport {
  step: number;
  /** The step's wall time on this rank. */
  seconds: number;
  /** [sequence number, wait in seconds] of each collective the rank completed in the step. */
  ops: [number, number][];
}

export interface StragglerOptions {
  /** EWMA weight of the newest step (default 0.3). */
  alpha?: number;
  /** Steps the chronic / one-off classification looks back over (default 16). */
  window?: number;
  /** Share of the window's steps a chronic straggler is late in (default 0.5). */
  chronicShare?: number;
  /** Lateness, as a share of the median step time, that makes a rank late in a step (default 0.2). */
  lateShare?: number;
  /** ... and at least this many seconds (default 0.005). */
  minLatenessSeconds?: number;
  /** Leading steps left out (JIT warm-up, first allocations; default 1). */
  warmupSteps?: number;
}

export type StragglerPattern = 'chronic' | 'intermittent' | 'one-off';

export interface RankStraggler {
  rank: number;
  /** EWMA of lateness / median step time. */
  score: number;
  /** EWMAs, seconds per step. */
  stepSeconds: number;
  latenessSeconds: number;
  waitSeconds: number;
  /** Steps of the window this rank was late in, and the window's length so far. */
  lateSteps: number;
  windowSteps: number;
  /** The window's latest late step and its largest lateness (s), or null / 0. */
  lastLateStep: number | null;
  maxLatenessSeconds: number;
  pattern: StragglerPattern | null;
  role: 'culprit' | 'victim' | 'ok';
}

export interface StragglerVerdict {
  /** The newest step scored; null before any. */
  step: number | null;
  /** Steps scored. */
  steps: number;
  /** The rank the job waits for, steadily; null when none. */
  culprit: number | null;
  /** Every rank late in the window: chronic, then intermittent, then one-off, each highest score first. */
  stragglers: { rank: number; pattern: StragglerPattern; score: number; lateSteps: number; windowSteps: number; lastLateStep: number; maxLatenessSeconds: number }[];
  /** Ranks that only wait. */
  victims: number[];
  ranks: RankStraggler[];
}

const SEVERITY: Record<StragglerPattern, number> = { chronic: 0, intermittent: 1, 'one-off': 2 };

/** One step's per-rank lateness and wait over the collectives every rank reported. */
export function stepLateness(reports: StepReport[]): { lateness: number[]; wait: number[] } {
  const maps = reports.map((r) => new Map(r.ops));
  const common = [...maps[0]?.keys() ?? []].filter((seq) => maps.every((m) => m.has(seq)));
  const lateness = reports.map(() => 0);
  const wait = reports.map(() => 0);
  for (const seq of common) {
    const w = maps.map((m) => m.get(seq)!);
    const most = Math.max(...w);
    w.forEach((x, r) => {
      lateness[r]! += most - x;
      wait[r]! += x;
    });
  }
  return { lateness, wait };
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? (s[(s.length - 1) >> 1]! + s[s.length >> 1]!) / 2 : NaN;
}

interface RankState {
  score: number;
  step: number;
  lateness: number;
  wait: number;
  /** Per step of the window: lateness when late, else 0. */
  recent: { step: number; lateness: number }[];
}

/** Scores steps as they come (every rank's report of one step at a time) and gives the verdict. */
export class StragglerScores {
  readonly options: Required<StragglerOptions>;
  #ranks: RankState[] | null = null;
  #steps = 0;
  #lastStep: number | null = null;
  #medianStep = NaN;

  constructor(options: StragglerOptions = {}) {
    this.options = { alpha: 0.3, window: 16, chronicShare: 0.5, lateShare: 0.2, minLatenessSeconds: 0.005, warmupSteps: 1, ...options };
  }

  /** The threshold a step's lateness must reach, given that step's median step time. */
  threshold(medianStepSeconds: number): number {
    return Math.max(this.options.minLatenessSeconds, this.options.lateShare * medianStepSeconds);
  }

  /** Adds one step: `reports[r]` is rank r's report of it. False: a warm-up step, left out. */
  add(reports: StepReport[]): boolean {
    const step = reports[0]!.step;
    if (step < this.options.warmupSteps) return false;
    const { alpha, window } = this.options;
    const { lateness, wait } = stepLateness(reports);
    const med = median(reports.map((r) => r.seconds));
    const limit = this.threshold(med);
    const ewma = (old: number, x: number) => (this.#steps === 0 ? x : alpha * x + (1 - alpha) * old);
    this.#ranks ??= reports.map(() => ({ score: 0, step: 0, lateness: 0, wait: 0, recent: [] }));
    reports.forEach((rep, r) => {
      const s = this.#ranks![r]!;
      s.score = ewma(s.score, med > 0 ? lateness[r]! / med : 0);
      s.step = ewma(s.step, rep.seconds);
      s.lateness = ewma(s.lateness, lateness[r]!);
      s.wait = ewma(s.wait, wait[r]!);
      s.recent.push({ step, lateness: lateness[r]! >= limit ? lateness[r]! : 0 });
      if (s.recent.length > window) s.recent.shift();
    });
    this.#medianStep = this.#steps === 0 ? med : alpha * med + (1 - alpha) * this.#medianStep;
    this.#steps += 1;
    this.#lastStep = step;
    return true;
  }

  verdict(): StragglerVerdict {
    const ranks: RankStraggler[] = (this.#ranks ?? []).map((s, rank) => {
      const late = s.recent.filter((x) => x.lateness > 0);
      const n = s.recent.length;
      const pattern: StragglerPattern | null = late.length === 0 ? null
        : n >= 3 && late.length >= this.options.chronicShare * n ? 'chronic'
          : late.length >= 2 ? 'intermittent' : 'one-off';
      return {
        rank, score: s.score, stepSeconds: s.step, latenessSeconds: s.lateness, waitSeconds: s.wait,
        lateSteps: late.length, windowSteps: n, lastLateStep: late.at(-1)?.step ?? null,
        maxLatenessSeconds: Math.max(0, ...late.map((x) => x.lateness)), pattern,
        role: pattern ? 'culprit' : 'ok',
      };
    });
    const limit = this.threshold(this.#medianStep);
    for (const r of ranks) if (!r.pattern && r.waitSeconds >= limit) r.role = 'victim';
    const stragglers = ranks.filter((r) => r.pattern).sort((a, b) => SEVERITY[a.pattern!] - SEVERITY[b.pattern!] || b.score - a.score)
      .map((r) => ({ rank: r.rank, pattern: r.pattern!, score: r.score, lateSteps: r.lateSteps, windowSteps: r.windowSteps, lastLateStep: r.lastLateStep!, maxLatenessSeconds: r.maxLatenessSeconds }));
    const steady = stragglers.find((s) => s.pattern === 'chronic') ?? stragglers.find((s) => s.pattern === 'intermittent');
    return { step: this.#lastStep, steps: this.#steps, culprit: steady?.rank ?? null, stragglers, victims: ranks.filter((r) => r.role === 'victim').map((r) => r.rank), ranks };
  }
}

/** One line: the culprit and its pattern, other stragglers, the victims. */
export function formatVerdict(v: StragglerVerdict): string {
  if (!v.stragglers.length) return `stragglers: none in the last ${v.ranks[0]?.windowSteps ?? 0} steps`;
  const parts = v.stragglers.map((s) => s.pattern === 'one-off'
    ? `rank ${s.rank} one-off (step ${s.lastLateStep}, ${(s.maxLatenessSeconds * 1000).toFixed(0)} ms late)`
    : `rank ${s.rank} ${s.pattern} (score ${s.score.toFixed(2)}, late in ${s.lateSteps}/${s.windowSteps} steps)`);
  return `stragglers: ${parts.join('; ')}${v.victims.length ? `; waiting for them: ranks ${v.victims.join(', ')}` : ''}`;
}
