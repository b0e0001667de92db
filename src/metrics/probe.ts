/**
 * Step probes: what train() calls at fixed points of each step, for code that must
 * look at (or, to test a detector, damage) the state between the loop's phases: the
 * silent-data-corruption sentinel (sdc.ts) and the fault injector (sdc-inject.ts).
 * Probes run in the order given, on every rank, in step.
 */
import type { Communicator } from '../comm/communicator.js';
import type { TinyLM } from '../models/tiny-lm/tiny-lm.js';
import type { Optimizer } from '../runtime/optim.js';
import type { DataParallel } from '../runtime/types.js';

export interface StepContext {
  step: number;
  comm: Communicator;
  /** The runtime (DistributedDataParallel or FullyShardedDataParallel on the CPU path). */
  dp: DataParallel<unknown, unknown>;
  optimizer: Optimizer;
  /** Ranks whose parameters and optimizer state must be bit-identical: DDP all, hybrid FSDP the replicate group; null: none. */
  replicas: Communicator | null;
  model: TinyLM;
  /** This rank's rows of the step (micro-batches back to back). */
  rows: Int32Array;
  microRows: number;
  microBatches: number;
  /** The gradScale each micro-batch's forwardBackward ran with. */
  gradScale: number;
}

export interface StepProbe {
  /** Step `step` begins (before its data is read). */
  begin?(step: number): void;
  /** Wraps the model hooks (e.g. to see each local gradient before it is reduced). */
  hooks?<H extends object>(hooks: H): H;
  /** The gradients are reduced; the optimizer step has not run (parameters are the step's). */
  reduced?(ctx: StepContext): Promise<void> | void;
  /** After the optimizer step. */
  stepped?(ctx: StepContext): Promise<void> | void;
}
