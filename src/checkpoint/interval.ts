/**
 * How often to checkpoint. Young (1974): tau = sqrt(2 * delta * M). Daly (2006),
 * higher order: tau = sqrt(2 delta M) * [1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9] - delta
 * for delta < 2M, else M. delta = the cost of one checkpoint as training sees it
 * (the stall, for async saves), M = mean time between failures. Any one time unit.
 * Check: delta = 5 min, M = 24 h gives 117 min (Daly's own figure caption).
 */
import { NcclNodeError } from '../errors.js';

export function youngInterval(delta: number, mtbf: number): number {
  check(delta, mtbf);
  return Math.sqrt(2 * delta * mtbf);
}

export function dalyInterval(delta: number, mtbf: number): number {
  check(delta, mtbf);
  if (delta >= 2 * mtbf) return mtbf;
  const r = delta / (2 * mtbf);
  return Math.sqrt(2 * delta * mtbf) * (1 + Math.sqrt(r) / 3 + r / 9) - delta;
}

/**
 * Steps between checkpoints: Daly's interval in seconds divided by the step time,
 * at least 1. `saveSeconds` is what a save costs the training loop.
 */
export function checkpointEverySteps(o: { saveSeconds: number; mtbfSeconds: number; stepSeconds: number }): number {
  if (!(o.stepSeconds > 0)) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `checkpointEverySteps: stepSeconds must be > 0, received ${o.stepSeconds}`);
  return Math.max(1, Math.round(dalyInterval(Math.max(o.saveSeconds, 1e-9), o.mtbfSeconds) / o.stepSeconds));
}

function check(delta: number, mtbf: number): void {
  if (!(delta > 0) || !(mtbf > 0)) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `checkpoint interval: save cost and MTBF must be > 0, received ${delta} and ${mtbf}`);
}
