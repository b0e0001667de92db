/** Sharded asynchronous checkpoints: save, load (resharding), latest, tools, interval and save policy; in-memory snapshots with peer replicas. */
export { Checkpointer, save, type CheckpointerOptions, type SaveHandle, type CommitInfo } from './save.js';
export { load, type LoadTarget, type LoadOptions, type LoadResult } from './load.js';
export { latest, listCheckpoints, prune, stepDirName, shardFileName } from './layout.js';
export { readManifest, manifestSchema, type Manifest } from './manifest.js';
export { flatShard, snapshot, type CheckpointState, type TensorShard, type TrainState, type RunMetadata } from './state.js';
export { verify, consolidate, resolveCheckpoint } from './tools.js';
export { youngInterval, dalyInterval, checkpointEverySteps } from './interval.js';
export { SavePolicy, type SavePolicyOptions, type SaveCost } from './save-policy.js';
export { trainingState, loadTraining } from './runtime.js';
export { gdsStatus } from './io.js';
export type { DeviceStaging, DeviceStagingOptions, StagingOptions } from './staging.js';
export type { HostPoolStats } from './host-pool.js';
export { InMemoryCheckpoint, type InMemoryOptions, type HeldBytes, type SnapshotResult, type RestoreResult, type Restorable } from './in-memory.js';
export { holders, planRestore, type Placement, type Inventory, type RestorePlan, type Source } from './in-memory-plan.js';
