/**
 * Pretraining probe: the configured model (TinyLM, or the GPT with model.kind
 * 'gpt': the same loop trains either) sized from the compact vocabulary, trained with
 * FSDP/ZeRO and bfloat16 parameters on the prepared corpus through a DataLoader
 * per rank, with asynchronous sharded checkpoints mid-run and at the end (the
 * loader's state in each). Gates: the loss falls. Also records what the restore
 * stage compares against: the final parameters' SHA-256, the losses, the sample ids.
 */
import type { Communicator } from '../comm/communicator.js';
import type { CommitInfo } from '../checkpoint/index.js';
import { train, type TrainConfig } from '../train/index.js';
import { pretrainSteps, type PocConfig } from './config.js';
import { ensureData, globalIds, loaderData, modelConfig, paths, sha256Ids, sha256Params, type LoaderData } from './corpus.js';
import { gate, type Plot } from './report.js';
import type { StageResult } from './stage.js';
import type { CompactVocab } from './vocab.js';

/** The run both gangs share: same model, schedule, parallelism and data. */
export function pretrainConfig(comm: Communicator, cfg: PocConfig, vocab: CompactVocab, data: LoaderData): TrainConfig {
  const p = cfg.pretrain;
  return {
    model: modelConfig(cfg, vocab),
    steps: pretrainSteps(cfg),
    globalBatch: p.globalBatch,
    microBatches: 1,
    parallel: { kind: 'fsdp', stage: p.stage, paramDtype: p.paramDtype },
    optimizer: { kind: 'adamw', lr: p.lr },
    clipNorm: 1,
    dataSeed: cfg.seed,
    data,
    device: comm.backend === 'nccl' ? 'cuda' : 'cpu',
  };
}

export const midStep = (cfg: PocConfig): number => Math.max(1, Math.floor(pretrainSteps(cfg) * cfg.pretrain.midFraction));

const mean = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);

/** 1 - mean(last 10%) / mean(first 10%) of the global losses. */
export function lossDrop(losses: readonly number[]): number {
  const k = Math.max(1, Math.floor(losses.length / 10));
  return 1 - mean(losses.slice(-k)) / mean(losses.slice(0, k));
}

/** At most `n` evenly spaced rows, so a long run's plots stay small. */
export function thin<T>(rows: readonly T[], n = 400): T[] {
  if (rows.length <= n) return [...rows];
  const every = rows.length / n;
  return Array.from({ length: n }, (_, i) => rows[Math.floor(i * every)]!);
}

/** Passes on every line except step lines other than every 50th. */
export function everyNth(log: (l: string) => void, n = 50): (l: string) => void {
  return (l) => {
    const m = /^step (\d+) /.exec(l);
    if (!m || Number(m[1]) % n === 0) log(l);
  };
}

export async function pretrainStage(comm: Communicator, cfg: PocConfig, out: string, log: (l: string) => void): Promise<StageResult> {
  const t0 = performance.now();
  const { vocab } = await ensureData(comm, cfg, out);
  const data = await loaderData(comm, cfg, out, vocab);
  const tc = pretrainConfig(comm, cfg, vocab, data);
  const mid = midStep(cfg);
  const saves: { step: number; stallMs: number; info: Promise<CommitInfo> }[] = [];
  const tTrain = performance.now();
  const r = await train(comm, {
    ...tc,
    log: everyNth(log),
    ckpt: {
      dir: paths(out).pretrainCkpt, at: [mid, tc.steps], keep: 0,
      onSave: ({ step, handle }) => void saves.push({ step, stallMs: handle.stallMs, info: handle.committed }),
    },
  });
  const trainSeconds = (performance.now() - tTrain) / 1000;
  const commits = await Promise.all(saves.map(async (s) => ({ ...(await s.info), stallMs: s.stallMs })));
  const ids = await globalIds(comm, data, 0, tc.steps);
  await data.loader.close();
  const per = tc.globalBatch * tc.model.seqLen;
  const tokensPerSec = (tc.steps * per) / trainSeconds;
  const perRank = await comm.allGatherObject({ rank: comm.rank, meanStepMs: mean(r.stepMs), tokensPerSec, stepMs: thin(r.stepMs.map((ms, i) => ({ step: i, ms }))) });
  const drop = lossDrop(r.losses);
  const stage = 'pretrain' as const;
  const plots: Plot[] = [
    {
      id: 'loss', title: 'Pretraining loss (global mean over ranks)',
      spec: { mark: 'line', encoding: { x: { field: 'step', type: 'quantitative' }, y: { field: 'loss', type: 'quantitative', scale: { zero: false } } } },
      rows: thin(r.losses.map((loss, step) => ({ step, loss }))),
    },
    {
      id: 'step-time', title: 'Step time per rank',
      spec: { mark: 'line', encoding: { x: { field: 'step', type: 'quantitative' }, y: { field: 'ms', type: 'quantitative', title: 'step time (ms)' }, color: { field: 'rank', type: 'nominal' } } },
      rows: perRank.flatMap((p) => p.stepMs.map((s) => ({ ...s, rank: p.rank }))),
    },
  ];
  return {
    stage,
    gates: [
      gate({ stage, name: 'loss drop (last 10% vs first 10%)', measured: drop, threshold: cfg.pretrain.minLossDrop, kind: 'min', unit: 'fraction', note: `${tc.steps} steps, ${tc.steps * per} tokens` }),
    ],
    metrics: {
      model: tc.model, steps: tc.steps, tokens: tc.steps * per, worldSize: comm.size, backend: comm.backend, parallel: tc.parallel,
      losses: r.losses, lossDrop: drop, tokensPerSec: Math.min(...perRank.map((p) => p.tokensPerSec)),
      perRank: perRank.map(({ rank, meanStepMs, tokensPerSec: tps }) => ({ rank, meanStepMs, tokensPerSec: tps })),
      midStep: mid,
      checkpoints: commits.map(({ step, stallMs, dir, bytes, seconds }) => ({ step, stallMs, dir, bytes, seconds, writeGBs: bytes / seconds / 1e9 })),
      paramsSha256: sha256Params(r.params),
      sampleIdsSha256: { beforeMid: sha256Ids(ids.slice(0, mid * tc.globalBatch)), afterMid: sha256Ids(ids.slice(mid * tc.globalBatch)) },
      vocabSize: vocab.size,
    },
    plots,
    seconds: (performance.now() - t0) / 1000,
  };
}
