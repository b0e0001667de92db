/**
 * An elastic data-parallel training loop (TinyLM, DDP on Gloo) that survives lost
 * ranks and takes new ones in without restarting any process.
 *
 * The global batch is constant: at world size W each rank takes globalBatch / W rows
 * of the step's global batch (the DataLoader's world-size-independent sample order),
 * so a step computes the same mean gradient over the same samples at any size, and
 * every sample is consumed once per epoch across shrinks and grows. Randomness is
 * keyed by the sample's global position (sampleRng), never by a per-rank stream, so it
 * follows the samples wherever they are trained.
 *
 * A step is committed on a rank once its optimizer step ran. A failed step is retried
 * or the group re-forms (ladder.ts); after a re-formation the most advanced member sends
 * its state to every member behind it (transfer.ts), and training continues at the
 * committed step with a new DDP wrapper and loader for the new size.
 */
import type { Communicator } from '../comm/communicator.js';
import type { TrainState } from '../checkpoint/state.js';
import { DataLoader, TokenDataset, type Batch, type LoaderState } from '../data/index.js';
import { NcclNodeError } from '../errors.js';
import { TinyLM, type TinyLMConfig } from '../models/tiny-lm/tiny-lm.js';
import { createOptimizer, DistributedDataParallel, type OptimizerOptions } from '../runtime/index.js';
import { mulberry32 } from '../util/prng.js';
import type { ElasticGroup } from './group.js';
import { EXIT_FULL_RESTART, faultOf, RecoveryLadder, type Decision, type LadderOptions } from './ladder.js';
import { planSync, syncState } from './transfer.js';

export interface ElasticTrainConfig {
  model: TinyLMConfig;
  /** Train until this many steps are committed. */
  steps: number;
  /** Sequences per step over all ranks, kept at every world size (each size must divide it). */
  globalBatch: number;
  optimizer: OptimizerOptions;
  clipNorm?: number;
  /** A prepared corpus (src/data); tokens are taken modulo the model's vocabulary. */
  dataset: TokenDataset | string;
  dataSeed: number;
  /** Per-token probability of replacing a token with a random one (keyed by sample position). */
  noise?: number;
  ladder?: Omit<LadderOptions, 'globalBatch'>;
  /** Before each step attempt (fault injection, tests). */
  beforeStep?: (s: StepContext) => Promise<void> | void;
  /** After each committed step, before the group checks for joiners. */
  afterStep?: (s: StepContext & { record: StepRecord }) => Promise<void> | void;
}

export interface StepContext {
  step: number;
  rank: number;
  size: number;
  generation: number;
  group: ElasticGroup;
}

export interface StepRecord {
  step: number;
  generation: number;
  rank: number;
  size: number;
  sampleIds: number[];
  loss: number;
}

export interface ElasticResult {
  params: Float32Array[];
  /** Global mean loss per step, by step (NaN where the loss reduction itself failed). */
  losses: number[];
  /** This rank's committed steps. */
  records: StepRecord[];
  decisions: RecoveryLadder['history'];
  ladder: RecoveryLadder;
}

/** The random stream of the sample at global position `position` (independent of who trains it). */
export function sampleRng(seed: number, position: number): () => number {
  return mulberry32(Math.imul(seed ^ 0x5bd1e995, 0x9e3779b1) ^ Math.imul(position + 1, 0x85ebca6b));
}

/** A batch as model rows (tokens modulo vocab), with per-sample noise. */
export function modelRows(batch: Batch, firstPosition: number, vocab: number, seqLen: number, seed: number, noise: number): Int32Array {
  const out = new Int32Array(batch.tokens.length);
  for (let i = 0; i < out.length; i++) out[i] = batch.tokens[i]! % vocab;
  if (noise > 0) {
    for (let r = 0; r < batch.sampleIds.length; r++) {
      const rand = sampleRng(seed, firstPosition + r);
      for (let t = 0; t <= seqLen; t++) if (rand() < noise) out[r * (seqLen + 1) + t] = Math.floor(rand() * vocab);
    }
  }
  return out;
}

interface Wrapped {
  comm: Communicator;
  dp: DistributedDataParallel;
  loader: DataLoader;
}

export async function trainElastic(group: ElasticGroup, cfg: ElasticTrainConfig): Promise<ElasticResult> {
  const model = new TinyLM(cfg.model);
  const optimizer = createOptimizer(cfg.optimizer);
  const ds = typeof cfg.dataset === 'string' ? await TokenDataset.open(cfg.dataset) : cfg.dataset;
  const ladder = new RecoveryLadder({ ...cfg.ladder, globalBatch: cfg.globalBatch });
  const T = cfg.model.seqLen;
  const noise = cfg.noise ?? 0;
  const rng = { kind: 'per-sample', seed: cfg.dataSeed, noise };
  let train: TrainState = { step: 0, rng };
  const losses: number[] = [];
  const records: StepRecord[] = [];

  /** After every formation: take the state of the most advanced member, then wrap for the new size. */
  let lastSync = { bytes: 0, ms: 0 };
  const wrap = async (): Promise<Wrapped> => {
    const synced = await syncState(group.comm, planSync(group.members), { params: model.params, optimizer, train });
    train = synced.train;
    lastSync = { bytes: synced.bytes, ms: synced.ms };
    return rewrap();
  };
  /** DDP and loader for the current communicator at the committed step (also after a retry: fresh bucket state). */
  const rewrap = async (): Promise<Wrapped> => {
    const comm = group.comm;
    const dp = await DistributedDataParallel.create(comm, model.params, optimizer, { broadcastParams: false });
    const loader = await DataLoader.create(ds, { seqLen: T, globalBatch: cfg.globalBatch, rank: comm.rank, worldSize: comm.size, seed: cfg.dataSeed });
    if (train.data) loader.load(train.data as LoaderState);
    else loader.skip(train.step);
    return { comm, dp, loader };
  };

  const fullRestart = async (d: Decision, ms: number): Promise<never> => {
    ladder.record(d, ms, { generation: group.generation, step: train.step });
    throw new NcclNodeError('ERR_UNAVAILABLE', `elastic training cannot continue in-process (${d.reason}): restart the gang from its checkpoint (exit ${EXIT_FULL_RESTART})`, { exitCode: EXIT_FULL_RESTART, action: d.action });
  };

  /** Re-forms until a generation is wrapped, or escalates to a full restart. */
  const reform = async (t0: number, cause?: unknown): Promise<Wrapped> => {
    for (let attempt = 0; ; attempt++) {
      const previous = group.comm.size;
      try {
        const round = await group.reform(train.step, cause);
        const d = ladder.onRound(previous, round.members.length);
        if (d.action === 'full-restart') return await fullRestart(d, performance.now() - t0);
        const w = await wrap();
        // The cost's parts: the membership round (the window when a missing member is not known gone), the state transfer.
        ladder.record(d, performance.now() - t0, {
          generation: group.generation, size: w.comm.size, step: train.step,
          roundMs: round.ms, transferMs: lastSync.ms, transferBytes: lastSync.bytes,
          via: group.formation.via, commMs: group.formation.ms,
        });
        return w;
      } catch (err) {
        if (err instanceof NcclNodeError && err.details.exitCode === EXIT_FULL_RESTART) throw err;
        if (attempt >= 2) return await fullRestart({ action: 'full-restart', reason: `re-forming failed ${attempt + 1} times: ${(err as Error).message}` }, performance.now() - t0);
      }
    }
  };

  let w = await wrap();
  let retries = 0;
  while (train.step < cfg.steps) {
    const { comm, dp, loader } = w;
    const step = train.step;
    const ctx = { step, rank: comm.rank, size: comm.size, generation: group.generation, group };
    let committed = false;
    try {
      await cfg.beforeStep?.(ctx);
      const batch = await loader.next();
      const per = cfg.globalBatch / comm.size;
      const rows = modelRows(batch, step * cfg.globalBatch + comm.rank * per, cfg.model.vocab, T, cfg.dataSeed, noise);
      dp.zeroGrad();
      const loss = await model.forwardBackward(rows, per, { gradScale: 1 / (per * T), hooks: dp.hooks });
      await dp.finish();
      if (cfg.clipNorm) await dp.clipGradNorm(cfg.clipNorm);
      await dp.step();
      committed = true;
      train = { step: step + 1, data: loader.state(), rng };
      const record: StepRecord = { step, generation: group.generation, rank: comm.rank, size: comm.size, sampleIds: batch.sampleIds, loss };
      records.push(record);
      await cfg.afterStep?.({ ...ctx, record });
      // One reduction carries the mean loss and (from rank 0) the joiners waiting: no extra round trip.
      const red = new Float64Array([loss / comm.size, comm.rank === 0 ? await group.pendingJoiners() : 0]);
      await comm.allReduce(red, { op: 'sum' });
      losses[step] = red[0]!;
      retries = 0;
      if (red[1]! > 0 && train.step < cfg.steps) w = await reform(performance.now());
    } catch (err) {
      const t0 = performance.now();
      if (committed) losses[step] = NaN;
      const d = ladder.onFault(faultOf(err, retries, comm.state === 'ok'));
      if (d.action === 'raise') throw err;
      if (d.action === 'retry' && !committed) {
        retries++;
        w = await rewrap();
        ladder.record({ action: 'retry', reason: d.reason }, performance.now() - t0, { generation: group.generation, step });
        continue;
      }
      retries = 0;
      w = await reform(t0, err);
    }
  }
  await ds.close();
  return { params: model.params.map((p) => p.data.slice()), losses, records, decisions: ladder.history, ladder };
}

/** The exit code a caller should leave with after `err` (EXIT_FULL_RESTART or 1). */
export function exitCodeOf(err: unknown): number {
  return err instanceof NcclNodeError && err.details.exitCode === EXIT_FULL_RESTART ? EXIT_FULL_RESTART : 1;
}
