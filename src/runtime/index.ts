/** The training runtime: DDP bucketing, FSDP/ZeRO sharding, optimizers, device mesh. */
export type { ParamLike, ModelHooks, DataParallel, MemoryReport, FlatPiece, DataParallelState, DevicePieceData } from './types.js';
export { DistributedDataParallel, assignBuckets } from './ddp.js';
export { FullyShardedDataParallel, shardLayout } from './fsdp.js';
export { AdamW, SGD, createOptimizer, type Optimizer, type OptimizerState, type Slot } from './optim.js';
export { DeviceMesh, meshCoords, meshGroup, MESH_DIMS, type MeshDim } from './mesh.js';
export type { DDPOptions, FSDPOptions, OptimizerOptions, MeshOptions } from './runtime-options.js';
export { toHalf, fromHalf, roundTo, type HalfDType } from './cast.js';
// GPU path: the same runtime on DeviceBuffers over an NCCL communicator (docs/runtime.md, "GPU path").
export { DeviceDistributedDataParallel, type DeviceDataParallel } from './ddp.js';
export { DeviceFullyShardedDataParallel } from './fsdp.js';
export { hostStorage, type Storage, type RuntimeParam, type SlotOptimizer } from './storage.js';
export { deviceStorage, type DeviceParam } from './device-storage.js';
export { Pipeline, schedule, type Action, type ScheduleName, type PipelineStageModule } from './pipeline.js';
