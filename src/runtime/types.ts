import type { DeviceBuffer } from '../gpu/device-buffer.js';

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
  /** Row-major shape, recorded in checkpoints (default [size]). */
  readonly shape?: readonly number[];
  data: Float32Array;
  /** Accumulated (+=) by backward; zeroed by the runtime's zeroGrad(). */
  grad: Float32Array;
}

/**
 * Called by the model's forward/backward; every hook is optional. P is the
 * parameter type the runtime hands out: ParamLike on the host path,
 * DeviceParam (runtime/device-storage.ts) on the GPU path.
 */
export interface ModelHooks<P = ParamLike> {
  /** Before unit `u` runs forward; await it (stage 3 gathers the unit here). */
  beforeForward?(u: number): Promise<void> | void;
  afterForward?(u: number): void;
  /** Before unit `u` runs backward (units run backward in reverse order). */
  beforeBackward?(u: number): Promise<void> | void;
  /** After unit `u`'s gradients are all accumulated. */
  afterBackward?(u: number): void;
  /** As soon as one parameter's gradient is final for this backward (DDP buckets). */
  gradReady?(p: P): void;
}

/**
 * What a training loop needs from DDP or FSDP, so either can be picked by config.
 * D is what state-dict pieces hold: host arrays, or on the GPU path DevicePieceData.
 */
export interface DataParallel<P = ParamLike, D = Float32Array> {
  readonly hooks: ModelHooks<P>;
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
  /** What this rank saves: live views of parameters and optimizer state (state-dict.ts). Call between steps. */
  stateDict(): DataParallelState<D>;
  /**
   * Restores a saved state: `fill` writes the pieces this rank needs into the given
   * live views (e.g. src/checkpoint's load) and returns the saved optimizer step.
   * Collective for FSDP stages 1-2 (unsharded parameters are re-gathered).
   */
  loadStateDict(fill: (targets: Record<string, FlatPiece<D>>) => Promise<{ optimizerStep: number }>): Promise<void>;
}

/** Piece data of the GPU runtime: DeviceBuffer views of parameters and optimizer state (host arrays also accepted). */
export type DevicePieceData = Float32Array | DeviceBuffer;

/** A flat range of a named global tensor, as src/checkpoint's TensorShard / LoadTarget take it. */
export interface FlatPiece<D = Float32Array> {
  data: D;
  globalShape: readonly number[];
  /** Row-major element offset of data[0] in the global tensor. */
  offset: number;
  length: number;
}

export interface DataParallelState<D = Float32Array> {
  /** `name` (parameter) and `name.exp_avg` etc. (optimizer state), as pieces. */
  tensors: Record<string, FlatPiece<D>>;
  /** The optimizer's step count (AdamW's bias correction depends on it). */
  optimizerStep: number;
}

export interface MemoryReport {
  params: number;
  grads: number;
  optimizer: number;
  /** Largest transient buffers (gathered units, unsharded gradients) alive at once. */
  peakTransient: number;
}
