/** nccl-node/models: the reference models the training loop, the POC, tests and benchmarks train. */
export { TinyLM, Param, DEFAULT_CONFIG, TEST_CONFIG, type TinyLMConfig } from './tiny-lm/tiny-lm.js';
export { DeviceTinyLM } from './tiny-lm/device-tiny-lm.js';
export { globalBatch, rowsOf } from './tiny-lm/synthetic-corpus.js';
export { GPT, GPT_TEST_CONFIG, unitsForwardBackward, type GPTConfig, type GPTUnits } from './gpt/gpt.js';
export { TensorParallelGPT, TPParam, sliceOf, placeSlice, type TensorShard as TPShard } from './gpt/tensor-parallel.js';
export { GPTPipelineStage, stageBlocks } from './gpt/gpt-pipeline-stage.js';
export { DeviceGPT } from './gpt/device-gpt.js';
export { createModel, modelKind, MODEL_KINDS, type LanguageModel, type ModelConfig, type ModelKind } from './language-model.js';
