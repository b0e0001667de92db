/**
 * When to save, decided by the checkpointer rather than by each training loop (as
 * TorchTitan's CheckpointManager._should_save): after exactly the steps of `at`
 * (and no others); or every `every` steps and after the last one; or, by default,
 * after the first step, then every Daly interval (interval.ts) computed from that
 * first save's measured stall and the step time, and after the last step.
 *
 * The answers depend only on the steps asked about and the costs given, so ranks
 * that ask about the same steps and are given the same costs (the maximum over
 * ranks: Checkpointer.recordSaveCost) save at the same steps, as they must.
 */
import { NcclNodeError } from '../errors.js';
import { checkpointEverySteps } from './interval.js';

export interface SavePolicyOptions {
  /** Save after exactly these steps (steps completed), and no others: no final save. */
  at?: readonly number[];
  /** Steps between saves; absent: Daly's interval from the first save's cost. */
  every?: number;
  /** Mean time between failures for Daly's interval (default 24 hours). */
  mtbfHours?: number;
}

/** What the first save cost the training loop, in seconds. */
export interface SaveCost {
  /** The save's stall: the whole snapshot, as if nothing overlapped it (an upper bound). */
  stallSeconds: number;
  /** One training step. */
  stepSeconds: number;
}

export const DEFAULT_MTBF_HOURS = 24;

export class SavePolicy {
  readonly #at: ReadonlySet<number> | undefined;
  readonly mtbfHours: number;
  #every: number | undefined;
  #saved = false;

  constructor(options: SavePolicyOptions = {}) {
    const { at, every, mtbfHours = DEFAULT_MTBF_HOURS } = options;
    if (at !== undefined) {
      const bad = at.find((s) => !Number.isSafeInteger(s) || s < 0);
      if (bad !== undefined) throw invalid(`at: expected non-negative integer steps, received ${bad}`);
    }
    if (every !== undefined && (!Number.isSafeInteger(every) || every < 1)) {
      throw invalid(`every: expected a positive integer number of steps, received ${every}`);
    }
    // The MTBF matters only when the interval is to be computed.
    if (at === undefined && every === undefined && !(mtbfHours > 0)) {
      throw invalid(`mtbfHours: expected a positive number, received ${mtbfHours}`);
    }
    this.#at = at === undefined ? undefined : new Set(at);
    this.#every = at === undefined ? every : undefined;
    this.mtbfHours = mtbfHours;
  }

  /** Steps between saves: given, or computed from the first save; undefined before that, and with `at`. */
  get every(): number | undefined {
    return this.#every;
  }

  /** True once a save was made whose cost the interval still waits for (recordCost). */
  get needsCost(): boolean {
    return this.#at === undefined && this.#every === undefined && this.#saved;
  }

  /** Whether to save after `step` completed steps; `last`: the run's final step. */
  shouldSave(step: number, options: { last?: boolean } = {}): boolean {
    if (this.#at) return this.#at.has(step);
    if (options.last) return true;
    if (this.#every !== undefined) return step % this.#every === 0;
    return !this.#saved; // the first save, whose cost sets the interval
  }

  /** A save was made (Checkpointer.save calls it). */
  saved(): void {
    this.#saved = true;
  }

  /** Sets the interval from the first save's cost (already the maximum over ranks); returns it. */
  recordCost(cost: SaveCost): number {
    if (!this.needsCost) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'checkpoint save policy: a save cost is taken once, after the first save, when no interval or step list was given');
    }
    this.#every = checkpointEverySteps({ saveSeconds: cost.stallSeconds, mtbfSeconds: this.mtbfHours * 3600, stepSeconds: cost.stepSeconds });
    return this.#every;
  }
}

function invalid(message: string): NcclNodeError {
  return new NcclNodeError('ERR_INVALID_ARGUMENT', `checkpoint save policy: ${message}`);
}
