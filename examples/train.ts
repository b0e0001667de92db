/**
 * Trains TinyLM data-parallel with DDP or FSDP/ZeRO, one process per rank:
 *
 *   node bin/nccl-node.js run --nproc-per-node 2 examples/train.ts --parallel fsdp --stage 3
 *
 * The loop itself is train() in src/train/loop.ts (nccl-node/train); this file is
 * its command line. --device cuda trains on the GPU runtime (NCCL); --ckpt-dir DIR
 * saves sharded asynchronous checkpoints, --resume continues from the newest.
 * --metrics-port P serves Prometheus metrics on P + LOCAL_RANK, --log-dir DIR writes
 * JSON-lines logs per rank and summary.json (docs/metrics.md).
 */
import { createHash } from 'node:crypto';
import { parseArgs } from 'node:util';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { init } from 'nccl-node';
import { TinyLM } from 'nccl-node/models';
import { MODELS, train } from 'nccl-node/train';
import { deviceMetrics, formatSummary, StragglerMonitor, summarize, TrainMetrics } from 'nccl-node/metrics';

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
      model: { type: 'string', default: 'default' },
      'ckpt-dir': { type: 'string' },
      'ckpt-every': { type: 'string' },
      'mtbf-hours': { type: 'string', default: '24' },
      keep: { type: 'string', default: '3' },
      resume: { type: 'boolean', default: false },
      device: { type: 'string', default: 'cpu' },
      'metrics-port': { type: 'string' },
      'log-dir': { type: 'string' },
    },
  });
  const model = MODELS[a.model];
  if (!model) throw new Error(`--model must be one of ${Object.keys(MODELS).join(', ')}, received ${a.model}`);
  if (a.resume && !a['ckpt-dir']) throw new Error('--resume needs --ckpt-dir');
  if (a.device !== 'cpu' && a.device !== 'cuda') throw new Error(`--device must be cpu or cuda, received ${a.device}`);
  // A timeout's flight records land beside the logs (docs/metrics.md).
  if (a['log-dir']) process.env.NCCL_NODE_TRACE_DIR ??= join(a['log-dir'], 'traces');
  const comm = await init(a.device === 'cuda' ? { backend: 'nccl' } : undefined);
  const parallel = a.parallel === 'fsdp'
    ? { kind: 'fsdp' as const, stage: Number(a.stage) as 1 | 2 | 3, paramDtype: a['param-dtype'] as 'float32' | 'bfloat16' }
    : { kind: 'ddp' as const, compression: a.compression as 'none' | 'bfloat16' | 'float16' };
  const log = comm.rank === 0 ? (l: string) => console.log(l) : undefined;
  log?.(`TinyLM ${new TinyLM(model).numParams} parameters, ${comm.size} ranks, ${JSON.stringify(parallel)}`);
  const metricsPort = a['metrics-port'] === undefined ? undefined : Number(a['metrics-port']);
  const metrics = metricsPort !== undefined || a['log-dir']
    ? await TrainMetrics.create({ rank: comm.rank, localRank: comm.localRank, worldSize: comm.size, model, port: metricsPort, logDir: a['log-dir'],
      stragglers: await StragglerMonitor.create(comm),
      ...(await deviceMetrics(a.device, a['param-dtype'] === 'bfloat16' ? 'bf16' : 'fp32')) })
    : undefined;
  if (metrics?.url) console.log(`rank ${comm.rank}: metrics at ${metrics.url}`);
  const r = await train(comm, {
    model,
    steps: Number(a.steps),
    globalBatch: Number(a['global-batch']),
    microBatches: Number(a['micro-batches']),
    parallel,
    optimizer: { kind: 'adamw', lr: Number(a.lr), weightDecay: 0.01 },
    ...(a['clip-norm'] ? { clipNorm: Number(a['clip-norm']) } : {}),
    dataSeed: 1,
    device: a.device,
    ...(a['ckpt-dir'] ? { ckpt: { dir: a['ckpt-dir'], resume: a.resume, mtbfHours: Number(a['mtbf-hours']), keep: Number(a.keep), ...(a['ckpt-every'] ? { every: Number(a['ckpt-every']) } : {}) } } : {}),
    ...(log ? { log } : {}),
    ...(metrics ? { metrics } : {}),
  });
  if (metrics) {
    const run = await summarize(metrics, comm, a['log-dir']);
    if (run) log?.(formatSummary(run));
    await metrics.close();
  }
  // A fingerprint of the final parameters: equal across runs iff they are bit-identical.
  const h = createHash('sha256');
  for (const p of r.params) h.update(new Uint8Array(p.buffer, p.byteOffset, p.byteLength));
  log?.(`final params sha256 ${h.digest('hex')}`);
  await comm.destroy();
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
