/**
 * What the training loop feeds its metrics: phase switches inside each step, the
 * model hooks (to time waits for gathers), checkpoint handles, and one record per
 * finished step. TrainMetrics (collector.ts) implements it; the loop holds only this.
 */
import type { SaveHandle } from '../checkpoint/save.js';
import type { MemoryReport } from '../runtime/types.js';

/**
 * Where a rank's step time goes. data: waiting for this step's rows. compute: forward,
 * backward, clipping, the optimizer. comm: exposed communication, the time the loop
 * waits on collectives it could not hide (dp.finish(), gathers awaited in the hooks,
 * the loss all-reduce). checkpoint: the checkpoint stall (save() and waiting for an
 * overlapped snapshot before the optimizer step).
 */
export type Phase = 'data' | 'compute' | 'comm' | 'checkpoint';
export const PHASES: readonly Phase[] = ['data', 'compute', 'comm', 'checkpoint'];

export interface StepRecord {
  step: number;
  loss: number;
  gradNorm: number;
  /** Tokens this rank trained on in the step. */
  tokens: number;
  /** The runtime's memory report (parameters, gradients, optimizer state). */
  memory?: MemoryReport;
}

export interface StepMetrics {
  /** Starts step `step` (0-based), in the data phase. */
  begin(step: number): void;
  /** From now on the step's time counts to `phase`. */
  phase(phase: Phase): void;
  /** Hooks that count the waits of the given hooks' before* promises as comm. */
  hooks<H extends object>(hooks: H): H;
  /** A save was started after the current step; its size and durations arrive as it completes. */
  checkpoint(handle: SaveHandle): void;
  /** The step finished. */
  end(record: StepRecord): void;
}
