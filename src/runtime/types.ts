/**
 * The contract between a hand-written model and the runtime. The runtime never
 * sees layers or tensors, only named flat parameters and five hooks; a model
 * that calls the hooks at unit boundaries gets DDP overlap and FSDP sharding.
 */

/**
 * One parameter tensor. The runtime may rebind `data` and `grad` (to bucket
 * views, gathered units or empty arrays), so a model reads them at use time
 * and never caches the arrays.
 */
export interface ParamLike {
  readonly name: string;
  /** Element count. */
  readonly size: number;
  data: Float32Array;
  /** Accumulated (+=) by backward; zeroed by the runtime's zeroGrad(). */
  grad: Float32Array;
}

/** Called by the model's forward/backward; every hook is optional. */
export interface ModelHooks {
  /** Before unit `u` runs forward; await it (stage 3 gathers the unit here). */
  beforeForward?(u: number): Promise<void> | void;
  afterForward?(u: number): void;
  /** Before unit `u` runs backward (units run backward in reverse order). */
  beforeBackward?(u: number): Promise<void> | void;
  /** After unit `u`'s gradients are all accumulated. */
  afterBackward?(u: number): void;
  /** As soon as one parameter's gradient is final for this backward (DDP buckets). */
  gradReady?(p: ParamLike): void;
}

/** What a training loop needs from DDP or FSDP, so either can be picked by config. */
export interface DataParallel {
  readonly hooks: ModelHooks;
  /** false: backward only accumulates locally (no_sync); true again on the last micro-batch. */
  setRequiresGradSync(sync: boolean): void;
  zeroGrad(): void;
  /** Resolves once every gradient reduction of this step has landed. */
  finish(): Promise<void>;
  /** Clips the global gradient norm (across all shards) to maxNorm; returns the norm before clipping. */
  clipGradNorm(maxNorm: number): Promise<number>;
  /** Optimizer step on what this rank owns, then makes parameters usable for the next forward. */
  step(): Promise<void>;
  /** Bytes this rank holds for parameters, gradients and optimizer state between steps. */
  memory(): MemoryReport;
}

export interface MemoryReport {
  params: number;
  grads: number;
  optimizer: number;
  /** Largest transient buffers (gathered units, unsharded gradients) alive at once. */
  peakTransient: number;
}
