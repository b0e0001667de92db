/**
 * 3D-parallel training of the GPT: data x tensor x pipeline parallel over a
 * DeviceMesh, read top to bottom:
 *
 *   mesh    tp ranks consecutive (inside a node), then dp, then pp (DeviceMesh's order);
 *           HSDP splits dp into shard groups (DeviceMesh's dp) x their replicas (replicate)
 *   model   each rank builds its TP shard of its pipeline stage's blocks
 *   step    this dp replica's rows of the global batch, cut into micro-batches, run
 *           through the pipeline by the schedule (TP collectives inside each block);
 *           gradients summed over dp; the global gradient norm clipped over all
 *           axes; the optimizer steps this rank's shard of its stage
 *
 * The loss and gradients equal one process training the whole batch (float32
 * rounding aside): gradScale is 1 / (tokens of the global batch), so summing the
 * replicas' gradients is the mean, and the norm counts every element once
 * (TP-replicated tensors only on tp rank 0).
 *
 * device 'cuda' (on an NCCL world) keeps the parameters, gradients and optimizer
 * state in DeviceBuffers and runs the dp reduction, the norm, clipping and the
 * step on the device storage; the layers compute on a host mirror
 * (models/gpt/device-gpt.ts), their tp and pp traffic staged through DeviceBuffers
 * over NCCL (runtime/host-staged-comm.ts). The same code, the same results as on the host.
 */
import { Checkpointer, flatShard, load, type TensorShard } from '../checkpoint/index.js';
import type { Communicator } from '../comm/communicator.js';
import { NcclNodeError } from '../errors.js';
import type { DeviceBuffer } from '../gpu/device-buffer.js';
import { GPT, type GPTConfig, type GPTUnits } from '../models/gpt/gpt.js';
import { GPTPipelineStage, stageUnits } from '../models/gpt/gpt-pipeline-stage.js';
import { placeSlice, sliceOf, TensorParallelGPT, TPParam } from '../models/gpt/tensor-parallel.js';
import type { Param } from '../models/tiny-lm/tiny-lm.js';
import { DeviceGPT } from '../models/gpt/device-gpt.js';
import { createOptimizer, deviceStorage, DeviceMesh, hostStorage, type OptimizerOptions } from '../runtime/index.js';
import { HostStagedComm } from '../runtime/host-staged-comm.js';
import { Pipeline, schedule, type ScheduleName } from '../runtime/pipeline.js';
import { DataParallelOptimizer, type DPStorage, type ZeroStage } from './dp-optimizer.js';

export interface Train3DConfig {
  model: GPTConfig;
  mesh: { dp: number; tp: number; pp: number };
  steps: number;
  /** Sequences per step over all dp replicas; divisible by dp x micro. */
  globalBatch: number;
  /** Micro-batches per step per replica (the pipeline's M). */
  micro: number;
  schedule: ScheduleName;
  /** Model chunks per pipeline rank for 'interleaved-1f1b' (default 1). */
  chunks?: number;
  optimizer: OptimizerOptions;
  /**
   * ZeRO on the dp axis (dp-optimizer.ts): 0 replicates the optimizer, 1 shards its state, 2 also the reduced
   * gradients, 3 also the parameters between steps (FSDP).
   */
  zero?: ZeroStage;
  /**
   * Hybrid sharding: the dp ranks as `replicate` groups of dp / replicate. ZeRO (`zero`) shards
   * within a group; the reduced gradient of each shard is all-reduced across the groups.
   */
  hsdp?: { replicate: number };
  clipNorm?: number;
  /** Megatron-style sequence parallelism inside the tp group (TensorParallelGPT's option). */
  sequenceParallel?: boolean;
  /** Activation recomputation: keep each block's input only and run its forward again in the backward. */
  recompute?: boolean;
  /** The global batch of step s: globalBatch rows of seqLen+1 tokens, the same on every rank. */
  batch(step: number): Int32Array;
  /**
   * Checkpoints with global tensor names and shapes, so they load at any layout:
   * save after the steps in `at` under `dir`; `from` loads one (a root or one
   * checkpoint) before the first step and continues from its step.
   */
  ckpt?: { dir?: string; at?: number[]; from?: string };
  /**
   * 'cuda': parameters, gradients and optimizer state in DeviceBuffers, the world an
   * NCCL communicator (see the file comment); 'cpu' (default): host arrays.
   */
  device?: 'cpu' | 'cuda';
  /** Called before each step's dp reduction; what it returns is called after the optimizer step (e.g. to trace copies). */
  traceStep?: () => () => void;
  log?: (line: string) => void;
}

export interface Train3DResult {
  /** The step the loop started at (0, or the loaded checkpoint's). */
  start: number;
  losses: number[];
  gradNorms: number[];
  mesh: DeviceMesh;
  /** This rank's parameters (its stage, its TP shard); TPParam.shard says where each sits. */
  params: Param[];
  /** Parameter elements this rank held between steps (ZeRO-3: its 1/dp shard, HSDP 1/(dp / replicate); otherwise all of params). */
  residentParamElements: number;
  /**
   * Float32 elements this rank held after its last step (parameters, gradients,
   * optimizer state) and the most activation elements its stage held at once in any step.
   */
  memory: { params: number; grads: number; optimizer: number; activationsPeak: number; modelParams: number };
}

export async function train3d(world: Communicator, cfg: Train3DConfig): Promise<Train3DResult> {
  const { dp, tp, pp } = cfg.mesh;
  const device = cfg.device === 'cuda';
  if (device !== (world.backend === 'nccl')) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `train3d: device '${cfg.device ?? 'cpu'}' does not fit a ${world.backend} world (NCCL trains with device 'cuda', Gloo with 'cpu')`);
  }
  if (device && cfg.ckpt) throw new NcclNodeError('ERR_UNAVAILABLE', "train3d: checkpoints are written from host storage; device 'cuda' runs without ckpt");
  const replicate = cfg.hsdp?.replicate ?? 1;
  if (!Number.isInteger(replicate) || replicate < 1 || dp % replicate !== 0) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `train3d: hsdp replicate ${replicate} must be a positive integer dividing dp ${dp}`);
  }
  // HSDP: the mesh's dp is the shard group, replicate the groups; a replica's rows are indexed across both.
  const mesh = await DeviceMesh.create(world, { dp: dp / replicate, replicate, tp, pp });
  const T = cfg.model.seqLen;
  const rowsPerReplica = cfg.globalBatch / dp, microRows = rowsPerReplica / cfg.micro;
  if (!Number.isInteger(microRows)) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `train3d: globalBatch ${cfg.globalBatch} must divide by dp ${dp} x micro ${cfg.micro}`);
  }
  if (cfg.sequenceParallel && (microRows * T) % tp !== 0) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `train3d: sequence parallelism splits a micro-batch's ${microRows * T} token rows over tp ${tp}: they must divide`);
  }
  const chunks = cfg.chunks ?? 1;
  // The layers compute on host arrays: on NCCL their collectives and sends are staged through device memory.
  const hostComm = (c: Communicator) => (device ? new HostStagedComm(c) : c);
  const pipe = await Pipeline.create(hostComm(mesh.get('pp')), { chunks });
  // Each rank allocates only its stage's parameters (the others' initial values are drawn and dropped).
  const units = stageUnits(cfg.model.layers, pipe.stages, pipe.stage, chunks);
  const model: GPTUnits<{ out: Float32Array }> = tp > 1
    ? new TensorParallelGPT(cfg.model, hostComm(mesh.get('tp')), cfg.sequenceParallel, units) : new GPT(cfg.model, units);
  const { tp: tpRank } = mesh.coords;
  const dpRank = mesh.coords.replicate * mesh.sizes.dp + mesh.coords.dp;
  const losses: number[] = [], gradNorms: number[] = [];
  let activationsPeak = 0;
  // This rank's parameters are its stage's, whatever the step: a stage built only to list them.
  const params: Param[] = new GPTPipelineStage(model, pipe.stage, pipe.stages, [], microRows, 1, chunks).params;
  // The global norm counts each element once: TP-replicated tensors on tp rank 0 only.
  const counted = new Set(params.filter((p) => isSharded(p) || tpRank === 0).map((p) => p.name));
  const onDevice = device ? await DeviceGPT.create(params) : null;
  const storage: DPStorage<Float32Array | DeviceBuffer> = device ? deviceStorage : hostStorage;
  const optimizer = await DataParallelOptimizer.create<Float32Array | DeviceBuffer>(storage, mesh.get('dp'), createOptimizer(cfg.optimizer),
    cfg.zero ?? 0, onDevice?.params ?? params, (p) => counted.has(p.name), mesh.get('replicate'));
  onDevice?.release(cfg.zero === 3);
  let start = 0;
  if (cfg.ckpt?.from) start = await load3d(cfg.ckpt.from, params, optimizer);
  const ck = cfg.ckpt?.dir && cfg.ckpt.at?.length ? await Checkpointer.create(cfg.ckpt.dir, { comm: world }) : null;

  for (let step = start; step < cfg.steps; step++) {
    const rows = cfg.batch(step).subarray(dpRank * rowsPerReplica * (T + 1), (dpRank + 1) * rowsPerReplica * (T + 1));
    const micro = Array.from({ length: cfg.micro }, (_, m) => rows.subarray(m * microRows * (T + 1), (m + 1) * microRows * (T + 1)));
    const stage = new GPTPipelineStage(model, pipe.stage, pipe.stages, micro, microRows, 1 / (cfg.globalBatch * T), chunks, cfg.recompute);
    await optimizer.gather(); // zeroes the gradients (ZeRO-3: after gathering the parameters)
    await onDevice?.pull(); // the host mirror the layers compute on
    await pipe.run(schedule(cfg.schedule, pipe.stages, pipe.stage, cfg.micro, chunks), stage);
    if (model instanceof TensorParallelGPT) await model.finishGrads(params); // sequence parallel: norms' gradients over tp
    activationsPeak = Math.max(activationsPeak, stage.peakSavedElements);
    if (onDevice) (await onDevice.push(), onDevice.release(cfg.zero === 3));

    // Data parallel: gradients reduced over the replicas (all-reduce, or reduce-scatter under ZeRO-2; HSDP: then across the groups).
    // The global norm: its squares summed over dp there, then over tp and pp here.
    const traced = cfg.traceStep?.();
    let sq = await optimizer.reduce();
    if (tp > 1) sq = await storage.allReduceScalar(mesh.get('tp'), sq);
    if (pp > 1) sq = await storage.allReduceScalar(mesh.get('pp'), sq);
    const norm = Math.sqrt(sq);
    gradNorms.push(norm);
    await optimizer.step(cfg.clipNorm ? Math.min(1, cfg.clipNorm / (norm + 1e-6)) : 1);
    traced?.();

    // The mean loss: the last stage of each replica holds its summed token loss.
    const loss = await storage.allReduceScalar(world, pipe.stage === pipe.stages - 1 && tpRank === 0 ? stage.losses.reduce((a, b) => a + b, 0) : 0);
    losses.push(loss / (cfg.globalBatch * T));
    cfg.log?.(`step ${step} loss ${losses.at(-1)!.toFixed(4)} grad_norm ${norm.toFixed(4)}`);
    if (ck && cfg.ckpt!.at!.includes(step + 1)) {
      await optimizer.gather();
      const tensors = await globalPieces(mesh, params, optimizer);
      optimizer.reshard();
      await (await ck.save({ tensors, train: { step: step + 1 }, metadata: { config: { model: cfg.model, mesh: cfg.mesh, hsdp: cfg.hsdp ?? null } } })).committed;
    }
  }
  await ck?.close();
  await pipe.destroy();
  const residentParamElements = optimizer.residentParamElements;
  // The model's own allocation, whichever units it lists: only this stage's (ZeRO-3: released between steps).
  const modelParams = model.units.flat().reduce((a, p) => a + p.data.length, 0);
  const memory = { ...optimizer.heldElements(), activationsPeak, modelParams };
  await optimizer.gather(); // the returned params hold their values, whatever the stage
  await onDevice?.pull();
  return { start, losses, gradNorms, mesh, params, residentParamElements, memory };
}

/**
 * What this rank saves: only replica dp 0 saves (HSDP: of replicate group 0); a TP-sharded tensor is gathered
 * over the tp group, and each tp rank saves 1/tp of the full tensor as one flat
 * range, so the file holds global tensors in pieces that any layout can read.
 */
async function globalPieces(mesh: DeviceMesh, params: Param[], optimizer: DataParallelOptimizer<Float32Array | DeviceBuffer>): Promise<Record<string, TensorShard>> {
  const { tp: tpSize } = mesh.sizes;
  const { tp: tpRank, dp: dpRank, replicate } = mesh.coords;
  const state = await optimizer.fullState();
  const out: Record<string, TensorShard> = {};
  for (const p of params) {
    const shard = p instanceof TPParam ? p.shard : null;
    const shape = shard ? shard.shape : p.shape;
    const numel = shape.reduce((a, b) => a * b, 1);
    const states = Object.entries(state).filter(([k]) => k.slice(0, k.lastIndexOf('.')) === p.name);
    for (const [name, local] of [[p.name, p.data], ...states] as const) {
      let full = local;
      if (shard) {
        const all = new Float32Array(local.length * tpSize);
        await mesh.get('tp').allGather(local, all);
        full = new Float32Array(numel);
        for (let r = 0; r < tpSize; r++) placeSlice(full, all.subarray(r * local.length, (r + 1) * local.length), shard, r);
      }
      if (dpRank !== 0 || replicate !== 0) continue;
      const piece = flatShard(full, numel, tpRank, tpSize); // data[0] must be the piece's first element
      out[name] = { ...piece, data: full.subarray(piece.offset, piece.offset + piece.length!), globalShape: shape };
    }
  }
  return out;
}

/** Loads a checkpoint saved at any layout into this rank's shard of its stage; returns its step. */
async function load3d(from: string, params: Param[], optimizer: DataParallelOptimizer<Float32Array | DeviceBuffer>): Promise<number> {
  const full = new Map<string, Float32Array>();
  const targets: Record<string, { data: Float32Array; offset: number }> = {};
  const stateNames = optimizer.stateNames();
  const statesOf = (p: Param) => stateNames.filter((k) => k.slice(0, k.lastIndexOf('.')) === p.name);
  for (const p of params) {
    const shard = p instanceof TPParam ? p.shard : null;
    const numel = (shard ? shard.shape : p.shape).reduce((a, b) => a * b, 1);
    for (const name of [p.name, ...statesOf(p)]) {
      full.set(name, new Float32Array(numel));
      targets[name] = { data: full.get(name)!, offset: 0 };
    }
  }
  const r = await load(from, targets);
  const local = (p: Param, name: string): Float32Array => {
    const shard = p instanceof TPParam ? p.shard : null;
    return shard ? sliceOf(full.get(name)!, shard.shape, shard.dim, shard.parts, shard.index, shard.groups) : full.get(name)!;
  };
  const tensors: Record<string, Float32Array> = {};
  optimizer.loadParams(new Map(params.map((p) => [p, local(p, p.name)])));
  for (const p of params) for (const name of statesOf(p)) tensors[name] = local(p, name);
  optimizer.loadState(r.step, tensors);
  return r.step;
}

const isSharded = (p: Param): boolean => p instanceof TPParam && p.shard !== null;
