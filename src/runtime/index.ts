/** The training runtime: DDP bucketing, FSDP/ZeRO sharding, optimizers, device mesh. */
export type { ParamLike, ModelHooks, DataParallel, MemoryReport } from './types.js';
export { DistributedDataParallel, assignBuckets } from './ddp.js';
export { FullyShardedDataParallel, shardLayout } from './fsdp.js';
export { AdamW, SGD, createOptimizer, type Optimizer, type Slot } from './optim.js';
export { DeviceMesh, meshCoords, meshGroup, MESH_DIMS, type MeshDim } from './mesh.js';
export type { DDPOptions, FSDPOptions, OptimizerOptions, MeshOptions } from './options.js';
export { toHalf, fromHalf, roundTo, type HalfDType } from './cast.js';
