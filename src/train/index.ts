/** nccl-node/train: the data-parallel training loop over the runtime (DDP or FSDP, host or device). */
export { train, MODELS, type TrainConfig, type TrainResult, type CheckpointConfig, type TrainData } from './loop.js';
