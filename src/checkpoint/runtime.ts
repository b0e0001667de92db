/**
 * Glue between the training runtime (DDP / FSDP stateDict) and checkpoints:
 * the optimizer step count travels in the train state, the tensors as pieces.
 */
import { NcclNodeError } from '../errors.js';
import type { DeviceBuffer } from '../gpu/device-buffer.js';
import type { DataParallel } from '../runtime/types.js';
import { load, type LoadOptions, type LoadResult } from './load.js';
import type { CheckpointState, RunMetadata, TrainState } from './state.js';

/** Host DDP/FSDP (Float32Array pieces) or the GPU runtime's (DeviceBuffer parameters, host optimizer state). */
type AnyDataParallel = DataParallel<unknown, Float32Array | DeviceBuffer>;

/** The state to hand Checkpointer.save(): dp's pieces (live views; save snapshots them) plus `train`. */
export function trainingState(dp: Pick<AnyDataParallel, 'stateDict'>, train: TrainState, metadata?: RunMetadata): CheckpointState {
  const sd = dp.stateDict();
  return { tensors: sd.tensors, train: { ...train, optimizerStep: sd.optimizerStep }, ...(metadata ? { metadata } : {}) };
}

/**
 * Restores dp (parameters, optimizer moments, step count) from `dir` (a root or
 * one checkpoint), at any world size. Collective for FSDP: every rank must call
 * it with the same `dir`; pass a resolved checkpoint directory (latest()) so all
 * ranks read the same one.
 */
export async function loadTraining(dir: string, dp: Pick<AnyDataParallel, 'loadStateDict'>, options: LoadOptions = {}): Promise<LoadResult> {
  let result: LoadResult | null = null;
  await dp.loadStateDict(async (targets) => {
    const r = await load(dir, targets, options);
    const optimizerStep = r.train.optimizerStep;
    if (typeof optimizerStep !== 'number') {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `checkpoint ${r.dir}: train state has no optimizerStep (not written by trainingState())`, { dir: r.dir });
    }
    result = r;
    return { optimizerStep };
  });
  return result!;
}
