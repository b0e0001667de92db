/** nccl-node/train: the data-parallel training loop over the runtime (DDP or FSDP, host or device). */
export { train, MODELS, type TrainConfig, type TrainResult, type CheckpointConfig, type TrainData } from './loop.js';
export { train3d, type Train3DConfig, type Train3DResult } from './train3d.js';
