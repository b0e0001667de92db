/**
 * Finetune stage: the pretrained model trained on the solved `train` problems alone,
 * as a new run (parameters from the pretrained checkpoint, optimizer state fresh,
 * step 0) with FSDP through train(), and scored by exact match of greedy
 * completions on the held-out problems before and after.
 *
 * Rows: every row begins with a problem at position 0, because that is where an
 * inference prompt sits (TinyLM's token mixing is a causal mean over the whole
 * prefix, and the GPT's positions are learned, so what precedes a problem or
 * where it starts changes how it is read); the rest of the row
 * is filled with further solved problems. The rows of step s depend only on s, and
 * each rank builds only its own.
 */
import type { Communicator } from '../comm/communicator.js';
import type { ModelConfig } from '../models/language-model.js';
import { train, type TrainData } from '../train/loop.js';
import { mulberry32 } from '../util/prng.js';
import { exactMatch, loadModel } from './generate.js';
import { gate, type Plot } from './report.js';
import type { StageResult } from './stage.js';
import { solved, type Problem, type ProblemSet } from './tasks.js';
import type { CompactVocab } from './vocab.js';

export interface FinetuneOptions {
  /** The pretrained checkpoint: one committed checkpoint directory (written by train() with FSDP). */
  from: string;
  /** Root for the finetune's checkpoints; the final one is returned as metrics.checkpoint. */
  ckptDir: string;
  /** The pretrain's model config, TinyLM or GPT (vocab = CompactVocab.size). */
  model: ModelConfig;
  vocab: CompactVocab;
  problems: ProblemSet;
  steps: number;
  globalBatch: number;
  lr: number;
  /** Gate on held-out exact-match accuracy after finetuning (default DEFAULT_MIN_ACCURACY). */
  minAccuracy?: number;
  log?: (line: string) => void;
}

/**
 * The default accuracy gate. The finetune learns the format and most sums within a
 * few hundred steps; on held-out pairs TinyLM generalises only partly (it has no
 * attention, only a causal mean), so the bound is set well under what the POC's
 * schedules reach (docs/poc-inference.md gives the measurements).
 */
export const DEFAULT_MIN_ACCURACY = 0.05;

/** Completion tokens scored: a sum is one token, then the newline. */
const SCORE_TOKENS = 4;

/** `count` rows of seqLen + 1 tokens, rows [first, first + count) of global step `step`. */
export function finetuneRows(encoded: readonly Int32Array[], seqLen: number, seed: number, step: number, first: number, count: number): Int32Array {
  const W = seqLen + 1;
  const out = new Int32Array(count * W);
  for (let r = 0; r < count; r++) {
    const rand = mulberry32((seed * 0x9e3779b1) ^ (step * 104729 + (first + r) * 7919));
    for (let t = 0; t < W;) {
      const p = encoded[Math.floor(rand() * encoded.length)]!;
      const n = Math.min(p.length, W - t);
      out.set(p.subarray(0, n), r * W + t);
      t += n;
    }
  }
  return out;
}

/** Held-out exact match with each rank scoring every size-th problem; the sum is shared, so every rank returns the same. */
export async function sharedAccuracy(comm: Communicator, checkpoint: string, model: ModelConfig, vocab: CompactVocab, problems: readonly Problem[]): Promise<{ correct: number; total: number; accuracy: number }> {
  const lm = await loadModel(checkpoint, model);
  const mine = problems.filter((_, i) => i % comm.size === comm.rank);
  const { correct } = await exactMatch(lm, vocab, mine, { maxTokens: SCORE_TOKENS });
  const all = comm.size > 1 ? await comm.allGatherObject(correct) : [correct];
  const sum = all.reduce((a, b) => a + b, 0);
  return { correct: sum, total: problems.length, accuracy: problems.length ? sum / problems.length : 0 };
}

export async function finetuneStage(comm: Communicator, o: FinetuneOptions): Promise<StageResult> {
  const t0 = performance.now();
  const minAccuracy = o.minAccuracy ?? DEFAULT_MIN_ACCURACY;
  const before = await sharedAccuracy(comm, o.from, o.model, o.vocab, o.problems.heldOut);
  o.log?.(`held-out exact match before finetuning: ${before.correct}/${before.total}`);

  const encoded = o.problems.train.map((p) => o.vocab.encode(solved(p)));
  const seed = o.model.seed;
  const data: TrainData = { rows: (step, rank, rows) => finetuneRows(encoded, o.model.seqLen, seed, step, rank * rows, rows) };
  let checkpoint = '';
  const r = await train(comm, {
    model: o.model,
    steps: o.steps,
    globalBatch: o.globalBatch,
    microBatches: 1,
    parallel: { kind: 'fsdp', stage: 2 },
    optimizer: { kind: 'adamw', lr: o.lr },
    clipNorm: 1,
    dataSeed: seed,
    data,
    device: comm.backend === 'nccl' ? 'cuda' : 'cpu',
    ckpt: { dir: o.ckptDir, weights: o.from, at: [o.steps], overlap: false, onSave: (s) => void (checkpoint = s.handle.dir) },
    log: o.log && ((l) => {
      const step = /^step (\d+) /.exec(l);
      if (!step || Number(step[1]) % 50 === 0) o.log!(l); // every 50th step line, every other line
    }),
  });

  const after = await sharedAccuracy(comm, checkpoint, o.model, o.vocab, o.problems.heldOut);
  o.log?.(`held-out exact match after finetuning: ${after.correct}/${after.total}`);
  const gates = [
    gate({ stage: 'finetune', name: 'held-out exact-match accuracy', measured: after.accuracy, threshold: minAccuracy, kind: 'min', unit: 'fraction' }),
    gate({ stage: 'finetune', name: 'problems gained over the pretrained model', measured: after.correct - before.correct, threshold: 1, kind: 'min', unit: 'problems',
      note: `${before.correct} -> ${after.correct} of ${after.total} held-out problems` }),
  ];
  const plots: Plot[] = [{
    id: 'finetune-loss', title: 'Finetune loss',
    spec: { mark: 'line', encoding: { x: { field: 'step', type: 'quantitative' }, y: { field: 'loss', type: 'quantitative', title: 'loss (nats/token)' } } },
    rows: r.losses.map((loss, i) => ({ step: r.start + i + 1, loss })),
  }];
  return {
    stage: 'finetune', gates, plots, seconds: (performance.now() - t0) / 1000,
    metrics: {
      accuracyBefore: before.accuracy, accuracyAfter: after.accuracy, correctBefore: before.correct, correctAfter: after.correct, heldOut: after.total,
      checkpoint, losses: r.losses, steps: o.steps, globalBatch: o.globalBatch, lr: o.lr, minAccuracy,
    },
  };
}
