/**
 * The training loop: TinyLM (or the GPT, model.kind 'gpt') data-parallel with DDP or FSDP/ZeRO, one process per rank
 * (examples/train.ts is its command line; the POC, tests and benchmarks call train()).
 *
 * Read train() top to bottom: build the model, wrap it (the only place DDP and
 * FSDP, host and device differ), then per step: accumulate micro-batches, wait
 * for the reductions, clip, step. Tests and benchmarks import train() directly.
 *
 * --device cuda trains on the GPU runtime: parameters, gradients, shards and
 * optimizer state in DeviceBuffers, collectives on NCCL (the model itself computes
 * on host arrays mirrored from the device, src/models/tiny-lm/device-tiny-lm.ts).
 *
 * Checkpoints: --ckpt-dir DIR saves asynchronously with an overlapped snapshot (the
 * copy runs beside the next forward/backward; only the optimizer step waits for
 * it) every N steps, N from Daly's formula given the measured save stall
 * and --mtbf-hours (or --ckpt-every N), and at the end; --resume continues from
 * the newest committed checkpoint. The data of step s depends only on s, so a
 * resumed run is bit-identical to an uninterrupted one. `inMemory` adds in-memory
 * snapshots with peer replicas (docs/checkpoint.md, "In-memory checkpoints").
 */
import type { Communicator } from '../comm/communicator.js';
import { Checkpointer, latest, load, loadTraining, trainingState, type InMemoryCheckpoint, type RestoreResult, type SaveHandle } from '../checkpoint/index.js';
import {
  createOptimizer,
  DeviceDistributedDataParallel,
  DeviceFullyShardedDataParallel,
  DeviceMesh,
  deviceStorage,
  DistributedDataParallel,
  FullyShardedDataParallel,
  hostStorage,
  type DataParallel,
  type DeviceDataParallel,
  type DDPOptions,
  type FSDPOptions,
  type OptimizerOptions,
} from '../runtime/index.js';
import { globalBatch, rowsOf } from '../models/tiny-lm/synthetic-corpus.js';
import { DeviceTinyLM } from '../models/tiny-lm/device-tiny-lm.js';
import { DEFAULT_CONFIG, TEST_CONFIG, TinyLM, type TinyLMConfig } from '../models/tiny-lm/tiny-lm.js';
import { createModel, modelKind, type ModelConfig } from '../models/language-model.js';
import type { StepMetrics } from '../metrics/types.js';
import { LossHealth, reducedGradients, restoreBefore, type LossHealthOptions, type Verdict } from '../metrics/loss-health.js';
import type { StepContext, StepProbe } from '../metrics/probe.js';
import { NcclNodeError } from '../errors.js';

/** A few thousand parameters: what the checkpoint example test trains. */
const TINY_CONFIG: TinyLMConfig = { vocab: 61, dim: 16, hidden: 37, layers: 2, seqLen: 8, seed: 5 };
export const MODELS: Record<string, TinyLMConfig> = { default: DEFAULT_CONFIG, test: TEST_CONFIG, tiny: TINY_CONFIG };

export interface CheckpointConfig {
  dir: string;
  /** Continue from the newest committed checkpoint in dir (a fresh start if there is none). */
  resume?: boolean;
  /** Steps between saves; default: Daly's interval from the first save's stall and mtbfHours. */
  every?: number;
  mtbfHours?: number;
  keep?: number;
  /** Save after exactly these steps, and no others (no final save); [] only loads. */
  at?: number[];
  /** Load this checkpoint (a root or one checkpoint) instead of resuming from dir. */
  from?: string;
  /** A new run from trained weights (a finetune): this checkpoint's parameters only; step 0, fresh optimizer state. */
  weights?: string;
  /** Snapshot beside the next forward/backward (default) or before save() resolves. */
  overlap?: boolean;
  /** After each save() resolved: `params` gathers the full parameters (a collective). */
  onSave?: (s: { step: number; handle: SaveHandle; params: () => Promise<Float32Array[]> }) => Promise<void> | void;
}

export interface InMemoryConfig {
  store: InMemoryCheckpoint;
  /** Snapshot (a collective) after every `every` completed steps. */
  every: number;
  /** Start from store.restore(): own memory, else a peer's replica, else ckpt.dir's newest checkpoint (instead of ckpt.resume/from). */
  restore?: boolean;
  /** After the restore, before the first step. */
  onRestore?: (r: RestoreResult, dp: DataParallel | DeviceDataParallel) => Promise<void> | void;
}

/** Where each step's tokens come from (a DataLoader over a prepared corpus, a task set, ...). */
export interface TrainData {
  /**
   * This rank's rows of global step `step`: `rows` sequences of seqLen + 1 model
   * token ids (inputs and shifted targets). Called once per step, in step order.
   */
  rows(step: number, rank: number, rows: number): Promise<Int32Array> | Int32Array;
  /** JSON kept in every checkpoint's train state (`data`), e.g. a DataLoader's state(). */
  state?(): unknown;
  /** Given the saved `data` on resume, before the first step (e.g. DataLoader.load). */
  load?(state: unknown): void;
}

export interface TrainConfig {
  /** TinyLM's config, or a GPT's with kind: 'gpt' (the same loop trains either). */
  model: ModelConfig;
  steps: number;
  /** Sequences per optimizer step across all ranks; divisible by world size x microBatches. */
  globalBatch: number;
  /** Gradient accumulation: micro-batches per step, synchronised only on the last. */
  microBatches: number;
  parallel: ({ kind: 'ddp' } & DDPOptions) | ({ kind: 'fsdp' } & FSDPOptions);
  optimizer: OptimizerOptions;
  clipNorm?: number;
  /** Hybrid sharding (FSDP only): shard over `dp` ranks, replicate across `replicate` groups. */
  mesh?: { replicate: number; dp: number };
  dataSeed: number;
  /** Default: the synthetic corpus of src/models/tiny-lm/synthetic-corpus.ts, seeded by dataSeed. */
  data?: TrainData;
  /** Where parameters, gradients and optimizer state live: host arrays (Gloo) or the GPU (NCCL). */
  device?: 'cpu' | 'cuda';
  ckpt?: CheckpointConfig;
  /** In-memory snapshots with peer replicas (off by default). */
  inMemory?: InMemoryConfig;
  log?: (line: string) => void;
  /** Called before each step's finish(); what it returns is called after step() (e.g. to trace copies). */
  traceStep?: () => () => void;
  /** Per-step metrics (nccl-node/metrics TrainMetrics): phases of each step, its loss, checkpoints. */
  metrics?: StepMetrics;
  /** Loss health (nccl-node/metrics LossHealth): NaN/Inf, spikes, divergence, each with its action before the optimizer step. */
  health?: LossHealth | LossHealthOptions;
  /** Step probes, in order (the SDC sentinel, fault injectors); the first one's hooks see backward first. */
  probes?: StepProbe[];
}

export interface TrainResult {
  /** The step the loop started at (0, or the loaded checkpoint's). */
  start: number;
  losses: number[];
  gradNorms: number[];
  /** Final parameters, full and unpadded, in registration order. */
  params: Float32Array[];
  dp: DataParallel | DeviceDataParallel;
  stepMs: number[];
}

export async function train(comm: Communicator, cfg: TrainConfig): Promise<TrainResult> {
  const model = createModel(cfg.model);
  // The probes (the SDC sentinel's replica recompute) rebuild a TinyLM.
  if (cfg.probes?.length && !(model instanceof TinyLM)) throw new NcclNodeError('ERR_UNAVAILABLE', `train: step probes run on TinyLM only, received model kind ${modelKind(cfg.model)}`);
  // Every rank reads the full parameters before wrapping: DDP and FSDP start from the model's values.
  if (cfg.ckpt?.weights) await load(cfg.ckpt.weights, Object.fromEntries(model.params.map((p) => [p.name, { data: p.data, offset: 0 }])));
  const optimizer = createOptimizer(cfg.optimizer);
  const { kind, ...opts } = cfg.parallel;
  // With a mesh, FSDP shards within mesh.get('dp') and all-reduces across mesh.get('replicate').
  const mesh = cfg.mesh ? await DeviceMesh.create(comm, cfg.mesh) : null;
  const shardComm = mesh ? mesh.get('dp') : comm;
  const fsdpOpts = { ...(opts as FSDPOptions), replicate: mesh?.get('replicate') ?? null };
  const onDevice = cfg.device === 'cuda';
  const storage = onDevice ? deviceStorage : hostStorage;
  const dm = onDevice ? await DeviceTinyLM.create(model) : null;
  const dp = !dm
    ? kind === 'ddp'
      ? await DistributedDataParallel.create(comm, model.params, optimizer, opts as DDPOptions)
      : await FullyShardedDataParallel.create(shardComm, model.units, optimizer, fsdpOpts)
    : kind === 'ddp'
      ? await DeviceDistributedDataParallel.create(comm, dm.params, optimizer, opts as DDPOptions)
      : await DeviceFullyShardedDataParallel.create(shardComm, dm.units, optimizer, fsdpOpts);
  const hooks = dm ? dm.hooks(dp.hooks as DeviceDataParallel['hooks']) : (dp.hooks as DataParallel['hooks']);
  const sm = cfg.metrics, metricHooks = sm ? sm.hooks(hooks) : hooks; // waits for gathers count as communication
  const probes = cfg.probes ?? [];
  const timedHooks = probes.reduceRight((h, p) => (p.hooks ? p.hooks(h) : h), metricHooks);
  const health = cfg.health instanceof LossHealth ? cfg.health : cfg.health ? new LossHealth(cfg.health) : null;
  /** Full, unpadded parameters in registration order (a collective under FSDP). */
  const fullParams = async (): Promise<Float32Array[]> => {
    if (dp instanceof FullyShardedDataParallel || dp instanceof DeviceFullyShardedDataParallel) return dp.gatherParams();
    return dm ? dm.toHost() : model.params.map((p) => p.data.slice());
  };

  const rowsPerRank = cfg.globalBatch / comm.size;
  const microRows = rowsPerRank / cfg.microBatches;
  if (!Number.isInteger(microRows)) throw new Error(`globalBatch ${cfg.globalBatch} must divide by ${comm.size} ranks x ${cfg.microBatches} micro-batches`);
  const T = cfg.model.seqLen;
  // Gradient of the mean token loss over the global batch: each rank averages its
  // own tokens here, and the reduction averages over ranks.
  const gradScale = 1 / (microRows * T * cfg.microBatches);

  // at: [] only loads: nothing is written, so no Checkpointer is opened on the directory.
  // When to save is the Checkpointer's policy (every: 0 or absent: Daly's interval after a first save).
  const policy = cfg.ckpt && { at: cfg.ckpt.at, every: cfg.ckpt.every || undefined, mtbfHours: cfg.ckpt.mtbfHours };
  const ck = cfg.ckpt && cfg.ckpt.at?.length !== 0 ? await Checkpointer.create(cfg.ckpt.dir, { comm, keep: cfg.ckpt.keep ?? 3, policy }) : null;
  let first = 0;
  const restored = (r: { step: number; train: Record<string, unknown> }): number => {
    if (r.train.data !== undefined) cfg.data?.load?.(r.train.data);
    return r.step;
  };
  const mem = cfg.inMemory;
  if (mem && !(Number.isInteger(mem.every) && mem.every > 0)) throw new Error(`inMemory.every must be a positive integer, received ${mem.every}`);
  if (mem?.restore) {
    const r = await mem.store.restore(comm, dp, { durable: cfg.ckpt?.dir });
    first = restored(r);
    cfg.log?.(`restored step ${first} (${r.source}; ranks: ${r.sources.join(' ')}) in ${(r.seconds * 1000).toFixed(1)} ms`);
    await mem.onRestore?.(r, dp);
  } else if (cfg.ckpt?.from) first = restored(await loadTraining(cfg.ckpt.from, dp));
  else if (cfg.ckpt?.resume) {
    // Rank 0 resolves the checkpoint and every rank loads that one, so all ranks agree.
    const found = comm.rank === 0 ? (await latest(cfg.ckpt.dir)) ?? '' : '';
    const dir = await comm.broadcastObject(found, { root: 0 });
    if (dir) {
      first = restored(await loadTraining(dir, dp));
      cfg.log?.(`resumed from ${dir} at step ${first}`);
    } else cfg.log?.(`no checkpoint in ${cfg.ckpt.dir}: starting at step 0`);
  }
  // The saves' host staging is allocated and touched while the first steps run, so the first save stalls no longer than later ones.
  ck?.prepare(trainingState(dp, { step: first })).catch(() => undefined);
  let lastSave: SaveHandle | null = null;
  if (health?.mayRollback && !ck) throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'train: a loss-health rollback needs checkpoints (ckpt.dir, saving)');
  // Replicas whose parameters and optimizer state must agree bit for bit (the SDC checksum).
  const replicas = kind === 'ddp' ? comm : (mesh?.get('replicate') ?? null);

  const losses: number[] = [], gradNorms: number[] = [], stepMs: number[] = [];
  for (let step = first; step < cfg.steps; step++) {
    const t0 = performance.now();
    sm?.begin(step);
    for (const p of probes) p.begin?.(step);
    const mine = cfg.data
      ? await cfg.data.rows(step, comm.rank, rowsPerRank)
      : rowsOf(globalBatch(step, cfg.globalBatch, T, cfg.model.vocab, cfg.dataSeed), T, comm.rank * rowsPerRank, rowsPerRank);
    if (health?.isDropped(step)) {
      cfg.log?.(`step ${step} data dropped by a loss-health rollback`);
      continue;
    }
    const ctx = (): StepContext => ({ step, comm, dp: dp as StepContext['dp'], optimizer, replicas, model: model as TinyLM, rows: mine, microRows, microBatches: cfg.microBatches, gradScale });
    sm?.phase('compute');
    dp.zeroGrad();
    let loss = 0;
    for (let m = 0; m < cfg.microBatches; m++) {
      dp.setRequiresGradSync(m === cfg.microBatches - 1);
      const rows = rowsOf(mine, T, m * microRows, microRows);
      loss += (await model.forwardBackward(rows, microRows, { gradScale, hooks: timedHooks })) / cfg.microBatches;
      await dm?.flush();
    }
    const traced = cfg.traceStep?.();
    sm?.phase('comm');
    await dp.finish();
    sm?.phase('compute');
    for (const p of probes) await p.reduced?.(ctx());
    const norm = cfg.clipNorm ? await dp.clipGradNorm(cfg.clipNorm) : NaN;
    // Loss health decides before the step, so it needs the global loss now.
    let global = NaN, verdict: Verdict = 'apply';
    if (health) {
      sm?.phase('comm');
      global = await storage.allReduceScalar(comm, loss / comm.size);
      const sumSquares = storage.sumSquares as (b: readonly unknown[]) => Promise<number>;
      verdict = await health.check({ step, loss: global, gradSumSquares: () => sumSquares(reducedGradients(dp)), comm, optimizer, globalBatch: cfg.globalBatch });
    }
    sm?.phase('checkpoint');
    await lastSave?.snapshotted; // an overlapped snapshot must finish before the state changes
    sm?.phase('compute');
    if (verdict === 'apply') await dp.step();
    for (const p of probes) await p.stepped?.(ctx());
    traced?.();
    stepMs.push(performance.now() - t0);

    sm?.phase('comm');
    if (!health) global = await storage.allReduceScalar(comm, loss / comm.size);
    losses.push(global);
    gradNorms.push(norm);
    cfg.log?.(`step ${step} loss ${global.toFixed(4)}${cfg.clipNorm ? ` grad_norm ${norm.toFixed(4)}` : ''} ${stepMs.at(-1)!.toFixed(0)} ms${verdict === 'apply' ? '' : ` (${verdict})`}`);
    if (verdict === 'rollback') {
      sm?.phase('checkpoint');
      await ck!.wait();
      lastSave = null;
      const r = await restoreBefore(comm, cfg.ckpt!.dir, health!.pendingRollback!.data.from, dp);
      if (r.data !== undefined) cfg.data?.load?.(r.data);
      health!.rolledBack(r.step, r.dir);
      cfg.log?.(`loss health: rolled back to ${r.dir} (step ${r.step})`);
      step = r.step - 1;
      continue;
    }

    sm?.phase('checkpoint');
    const done = step + 1; // steps completed: what train.step records
    const stateAt = () => trainingState(dp, { step: done, dataSeed: cfg.dataSeed, ...(cfg.data?.state ? { data: cfg.data.state() } : {}) }, { config: { model: cfg.model, parallel: { ...cfg.parallel, replicate: undefined } }, codeVersion: 'nccl-node/train' });
    if (ck?.shouldSave(done, { last: done === cfg.steps })) {
      // Overlapped: the copy runs beside the next forward/backward (awaited before dp.step()).
      const t1 = performance.now();
      const overlap = cfg.ckpt!.overlap ?? true;
      // Saves due faster than they commit wait for the previous one (back-pressure)
      // rather than overrunning the checkpointer's pending limit; its failure was logged.
      if (lastSave) await lastSave.committed.catch(() => undefined);
      lastSave = await ck.save(stateAt(), { async: true, overlap });
      lastSave.committed.catch((err: Error) => cfg.log?.(`checkpoint step ${done} failed: ${err.message}`));
      sm?.checkpoint(lastSave);
      await cfg.ckpt!.onSave?.({ step: done, handle: lastSave, params: fullParams });
      if (ck.needsSaveCost) {
        // The interval's save cost: the whole snapshot, as if nothing overlapped it (an upper bound).
        await lastSave.snapshotted;
        const c = await ck.recordSaveCost({ stallSeconds: (performance.now() - t1) / 1000, stepSeconds: stepMs.at(-1)! / 1000 });
        cfg.log?.(`checkpoint every ${c.every} steps (save stall ${(c.stallSeconds * 1000).toFixed(1)} ms, step ${(c.stepSeconds * 1000).toFixed(0)} ms, MTBF ${c.mtbfHours} h)`);
      }
    }
    if (mem && done % mem.every === 0) {
      const r = await mem.store.snapshot(comm, stateAt());
      cfg.log?.(r.taken ? `in-memory snapshot step ${done}: ${r.held.total} bytes held, ${(r.seconds * 1000).toFixed(1)} ms` : `in-memory snapshot step ${done} skipped: ${r.reason}`);
    }
    sm?.end({ step, loss: global, gradNorm: norm, tokens: rowsPerRank * T, memory: dp.memory() });
  }
  if (lastSave) await lastSave.committed; // a failed final save fails the run
  await ck?.close();
  const params = await fullParams();
  return { start: first, losses, gradNorms, params, dp, stepMs };
}
