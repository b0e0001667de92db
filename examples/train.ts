/**
 * Trains TinyLM data-parallel with DDP or FSDP/ZeRO, one process per rank:
 *
 *   node bin/nccl-node.js run --nproc-per-node 2 examples/train.ts --parallel fsdp --stage 3
 *
 * Read train() top to bottom: build the model, wrap it (the only place DDP and
 * FSDP differ), then per step: accumulate micro-batches, wait for the
 * reductions, clip, step. Tests and benchmarks import train() directly.
 */
import { parseArgs } from 'node:util';
import { pathToFileURL } from 'node:url';
import type { Communicator } from '../src/comm/communicator.js';
import { init } from '../src/comm/init.js';
import { DistributedDataParallel } from '../src/runtime/ddp.js';
import { FullyShardedDataParallel } from '../src/runtime/fsdp.js';
import { DeviceMesh } from '../src/runtime/mesh.js';
import { createOptimizer } from '../src/runtime/optim.js';
import type { DDPOptions, FSDPOptions, OptimizerOptions } from '../src/runtime/options.js';
import type { DataParallel } from '../src/runtime/types.js';
import { globalBatch, rowsOf } from './tiny-lm/data.js';
import { DEFAULT_CONFIG, TinyLM, type TinyLMConfig } from './tiny-lm/model.js';

export interface TrainConfig {
  model: TinyLMConfig;
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
  log?: (line: string) => void;
}

export interface TrainResult {
  losses: number[];
  gradNorms: number[];
  /** Final parameters, full and unpadded, in registration order. */
  params: Float32Array[];
  dp: DataParallel;
  stepMs: number[];
}

export async function train(comm: Communicator, cfg: TrainConfig): Promise<TrainResult> {
  const model = new TinyLM(cfg.model);
  const optimizer = createOptimizer(cfg.optimizer);
  const { kind, ...opts } = cfg.parallel;
  // With a mesh, FSDP shards within mesh.get('dp') and all-reduces across mesh.get('replicate').
  const mesh = cfg.mesh ? await DeviceMesh.create(comm, cfg.mesh) : null;
  const shardComm = mesh ? mesh.get('dp') : comm;
  const dp: DataParallel = kind === 'ddp'
    ? await DistributedDataParallel.create(comm, model.params, optimizer, opts as DDPOptions)
    : await FullyShardedDataParallel.create(shardComm, model.units, optimizer, { ...(opts as FSDPOptions), replicate: mesh?.get('replicate') ?? null });

  const rowsPerRank = cfg.globalBatch / comm.size;
  const microRows = rowsPerRank / cfg.microBatches;
  if (!Number.isInteger(microRows)) throw new Error(`globalBatch ${cfg.globalBatch} must divide by ${comm.size} ranks x ${cfg.microBatches} micro-batches`);
  const T = cfg.model.seqLen;
  // Gradient of the mean token loss over the global batch: each rank averages its
  // own tokens here, and the reduction averages over ranks.
  const gradScale = 1 / (microRows * T * cfg.microBatches);

  const losses: number[] = [], gradNorms: number[] = [], stepMs: number[] = [];
  for (let step = 0; step < cfg.steps; step++) {
    const t0 = performance.now();
    const batch = globalBatch(step, cfg.globalBatch, T, cfg.model.vocab, cfg.dataSeed);
    dp.zeroGrad();
    let loss = 0;
    for (let m = 0; m < cfg.microBatches; m++) {
      dp.setRequiresGradSync(m === cfg.microBatches - 1);
      const rows = rowsOf(batch, T, comm.rank * rowsPerRank + m * microRows, microRows);
      loss += (await model.forwardBackward(rows, microRows, { gradScale, hooks: dp.hooks })) / cfg.microBatches;
    }
    await dp.finish();
    const norm = cfg.clipNorm ? await dp.clipGradNorm(cfg.clipNorm) : NaN;
    await dp.step();
    stepMs.push(performance.now() - t0);

    const global = new Float64Array([loss / comm.size]);
    if (comm.size > 1) await comm.allReduce(global, { op: 'sum' });
    losses.push(global[0]!);
    gradNorms.push(norm);
    cfg.log?.(`step ${step} loss ${global[0]!.toFixed(4)}${cfg.clipNorm ? ` grad_norm ${norm.toFixed(4)}` : ''} ${stepMs.at(-1)!.toFixed(0)} ms`);
  }
  const params = dp instanceof FullyShardedDataParallel ? await dp.gatherParams() : model.params.map((p) => p.data.slice());
  return { losses, gradNorms, params, dp, stepMs };
}

async function main(): Promise<void> {
  const { values: a } = parseArgs({
    options: {
      parallel: { type: 'string', default: 'ddp' },
      stage: { type: 'string', default: '3' },
      steps: { type: 'string', default: '10' },
      'global-batch': { type: 'string', default: '8' },
      'micro-batches': { type: 'string', default: '1' },
      'param-dtype': { type: 'string', default: 'float32' },
      compression: { type: 'string', default: 'none' },
      lr: { type: 'string', default: '3e-4' },
      'clip-norm': { type: 'string', default: '1' },
    },
  });
  const comm = await init();
  const parallel = a.parallel === 'fsdp'
    ? { kind: 'fsdp' as const, stage: Number(a.stage) as 1 | 2 | 3, paramDtype: a['param-dtype'] as 'float32' | 'bfloat16' }
    : { kind: 'ddp' as const, compression: a.compression as 'none' | 'bfloat16' | 'float16' };
  const log = comm.rank === 0 ? (l: string) => console.log(l) : undefined;
  log?.(`TinyLM ${new TinyLM(DEFAULT_CONFIG).numParams} parameters, ${comm.size} ranks, ${JSON.stringify(parallel)}`);
  await train(comm, {
    model: DEFAULT_CONFIG,
    steps: Number(a.steps),
    globalBatch: Number(a['global-batch']),
    microBatches: Number(a['micro-batches']),
    parallel,
    optimizer: { kind: 'adamw', lr: Number(a.lr), weightDecay: 0.01 },
    ...(a['clip-norm'] ? { clipNorm: Number(a['clip-norm']) } : {}),
    dataSeed: 1,
    ...(log ? { log } : {}),
  });
  await comm.destroy();
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
