/**
 * The loss detectors of loss health (loss-health.ts), pure and deterministic: given
 * the same accepted history, every rank computes the same verdict bit for bit.
 * History is kept per step, so a rollback can forget exactly the steps it undoes.
 */
import { NcclNodeError } from '../errors.js';

/** Accepted (finite, unflagged) losses, oldest first, keyed by step. */
export class LossHistory {
  readonly #steps: number[] = [];
  readonly #losses: number[] = [];

  /** Records `loss` of `step`; steps only grow (a rollback truncates first). */
  accept(step: number, loss: number): void {
    if (this.#steps.length && step <= this.#steps.at(-1)!) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `LossHistory: step ${step} after step ${this.#steps.at(-1)} (steps must grow; truncate() on a rollback)`);
    }
    this.#steps.push(step);
    this.#losses.push(loss);
  }

  /** Forgets every step >= `step` (what a rollback to `step` undoes). */
  truncate(step: number): void {
    let n = this.#steps.length;
    while (n > 0 && this.#steps[n - 1]! >= step) n--;
    this.#steps.length = n;
    this.#losses.length = n;
  }

  get size(): number {
    return this.#losses.length;
  }

  /** The last `n` accepted losses, oldest first. */
  last(n: number): number[] {
    return this.#losses.slice(Math.max(0, this.#losses.length - n));
  }

  /** The smallest accepted loss (Infinity when none). */
  min(): number {
    let m = Infinity;
    for (const x of this.#losses) if (x < m) m = x;
    return m;
  }
}

export interface SpikeOptions {
  /** Losses the mean and deviation are taken over (default 20). */
  window?: number;
  /** Fires when (loss - mean) / std exceeds this (default 6; upward only). */
  threshold?: number;
  /** Accepted losses needed before it can fire (default: window / 2, at least 2). */
  minSamples?: number;
}

/**
 * z = (x - mean) / std over the last `window` accepted losses (population std).
 * The deviation has a floor of 1e-6 x max(1, |mean|): a flat window would otherwise
 * make any rounding-level change infinitely significant.
 */
export function zScore(x: number, window: readonly number[]): number {
  const n = window.length;
  if (n === 0) return NaN;
  let mean = 0;
  for (const v of window) mean += v;
  mean /= n;
  let ss = 0;
  for (const v of window) ss += (v - mean) * (v - mean);
  const std = Math.max(Math.sqrt(ss / n), 1e-6 * Math.max(1, Math.abs(mean)));
  return (x - mean) / std;
}

export class SpikeDetector {
  readonly window: number;
  readonly threshold: number;
  readonly minSamples: number;

  constructor(o: SpikeOptions = {}) {
    this.window = positiveInt(o.window ?? 20, 'spike.window');
    this.threshold = positive(o.threshold ?? 6, 'spike.threshold');
    this.minSamples = positiveInt(o.minSamples ?? Math.max(2, Math.floor(this.window / 2)), 'spike.minSamples');
  }

  /** The z-score of `loss` against the history, and whether it is a spike. */
  assess(loss: number, h: LossHistory): { score: number; fires: boolean } {
    if (h.size < this.minSamples) return { score: NaN, fires: false };
    const score = zScore(loss, h.last(this.window));
    return { score, fires: score > this.threshold };
  }
}

export interface DivergenceOptions {
  /** Fires when the loss exceeds factor x the smallest accepted loss (default 2). */
  factor?: number;
  /** Losses the trend is fitted over, the new one included (default 20). */
  window?: number;
  /**
   * Fires when the least-squares line through the window rises by more than this
   * fraction of the window's mean from its first to its last step (default 0.1;
   * 0 turns the trend test off).
   */
  rise?: number;
  /** Accepted losses needed before it can fire (default: window). */
  minSamples?: number;
}

/** Rise of the least-squares line through ys (at x = 0..n-1) from x = 0 to x = n-1, over the mean of ys. */
export function relativeRise(ys: readonly number[]): number {
  const n = ys.length;
  if (n < 2) return 0;
  const xm = (n - 1) / 2;
  let ym = 0;
  for (const y of ys) ym += y;
  ym /= n;
  let sxy = 0, sxx = 0;
  ys.forEach((y, i) => {
    sxy += (i - xm) * (y - ym);
    sxx += (i - xm) * (i - xm);
  });
  return ((sxy / sxx) * (n - 1)) / Math.abs(ym);
}

export class DivergenceDetector {
  readonly factor: number;
  readonly window: number;
  readonly rise: number;
  readonly minSamples: number;

  constructor(o: DivergenceOptions = {}) {
    this.factor = positive(o.factor ?? 2, 'divergence.factor');
    if (this.factor <= 1) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `loss health: divergence.factor must be > 1, received ${this.factor}`);
    this.window = positiveInt(o.window ?? 20, 'divergence.window');
    this.rise = o.rise ?? 0.1;
    if (!(this.rise >= 0)) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `loss health: divergence.rise must be >= 0, received ${o.rise}`);
    this.minSamples = positiveInt(o.minSamples ?? this.window, 'divergence.minSamples');
  }

  /** score: loss over the running minimum; fires above `factor`, or on a rising trend. */
  assess(loss: number, h: LossHistory): { score: number; rise: number; fires: boolean } {
    if (h.size < this.minSamples) return { score: NaN, rise: NaN, fires: false };
    const score = loss / h.min();
    const rise = this.rise > 0 ? relativeRise([...h.last(this.window - 1), loss]) : 0;
    return { score, rise, fires: score > this.factor || (this.rise > 0 && rise > this.rise) };
  }
}

function positive(x: number, what: string): number {
  if (!(x > 0) || !Number.isFinite(x)) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `loss health: ${what} must be a positive number, received ${x}`);
  return x;
}

function positiveInt(x: number, what: string): number {
  if (!Number.isInteger(x) || x < 1) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `loss health: ${what} must be a positive integer, received ${x}`);
  return x;
}
