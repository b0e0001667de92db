/**
 * The POC's data, shared by the pretraining and restore gangs: the corpus written
 * and prepared once (by rank 0 of the pretraining gang), the compact vocabulary
 * (DIR/vocab.json), and per rank a DataLoader wrapped as train()'s `data` hook,
 * whose state travels in every checkpoint. The hook also logs the sample ids each
 * step consumed, so a resumed run can be compared with an uninterrupted one.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Communicator } from '../comm/communicator.js';
import { DataLoader, prepare, TokenDataset, type LoaderState } from '../data/index.js';
import { NcclNodeError } from '../errors.js';
import type { ModelConfig } from '../models/language-model.js';
import type { TrainData } from '../train/index.js';
import type { PocConfig } from './config.js';
import { additionProblems, solved, writeCorpus, type ProblemSet } from './tasks.js';
import { CompactVocab } from './vocab.js';

export const paths = (out: string) => ({
  corpus: join(out, 'data', 'corpus'),
  tokens: join(out, 'data', 'tokens'),
  vocab: join(out, 'vocab.json'),
  /** The resolved configuration every gang reads. */
  config: join(out, 'poc-config.json'),
  pretrainCkpt: join(out, 'ckpt', 'pretrain'),
  finetuneCkpt: join(out, 'ckpt', 'finetune'),
  stage: (name: string) => join(out, `stage-${name}.json`),
});

export function problemsOf(cfg: PocConfig): ProblemSet {
  return additionProblems({ maxOperand: cfg.data.maxOperand, heldOutFraction: cfg.data.heldOutFraction, seed: cfg.seed });
}

/**
 * Rank 0 writes and prepares the corpus and the vocabulary unless they are there
 * already (a later gang); every rank then reads the vocabulary. Collective.
 */
export async function ensureData(comm: Communicator, cfg: PocConfig, out: string): Promise<{ vocab: CompactVocab; problems: ProblemSet; prepared: boolean }> {
  const p = paths(out);
  const problems = problemsOf(cfg);
  let prepared = false;
  if (comm.rank === 0 && !existsSync(p.vocab)) {
    const files = await writeCorpus(p.corpus, { problems, bytes: cfg.data.corpusBytes, seed: cfg.seed });
    await prepare({ tokenizer: cfg.data.tokenizer, out: p.tokens, files });
    const dataset = await TokenDataset.open(p.tokens);
    // Every problem text, held-out ones included, so the finetune and inference stages encode without unknown ids.
    const texts = [...problems.train, ...problems.heldOut].map(solved);
    const vocab = await CompactVocab.build(cfg.data.tokenizer, { dataset, texts });
    await dataset.close();
    await vocab.write(p.vocab);
    prepared = true;
  }
  await comm.broadcastObject(true, { root: 0 });
  return { vocab: await CompactVocab.read(p.vocab), problems, prepared };
}

/** The model every stage builds: TinyLM's config as it always was, or the GPT's with kind 'gpt'. */
export function modelConfig(cfg: PocConfig, vocab: CompactVocab): ModelConfig {
  const { kind, dim, hidden, layers, seqLen, heads } = cfg.model;
  if (kind === 'gpt') return { kind, vocab: vocab.size, dim, heads, hidden, layers, seqLen, seed: cfg.seed };
  return { vocab: vocab.size, dim, hidden, layers, seqLen, seed: cfg.seed };
}

export interface LoaderData extends TrainData {
  loader: DataLoader;
  /** This rank's sample ids, by global step. */
  ids: Map<number, number[]>;
}

/** train()'s data hook over a DataLoader: tokenizer ids mapped into the compact vocabulary. */
export async function loaderData(comm: Communicator, cfg: PocConfig, out: string, vocab: CompactVocab): Promise<LoaderData> {
  const loader = await DataLoader.create(paths(out).tokens, {
    seqLen: cfg.model.seqLen, globalBatch: cfg.pretrain.globalBatch, rank: comm.rank, worldSize: comm.size, seed: cfg.seed,
  });
  const ids = new Map<number, number[]>();
  return {
    loader, ids,
    async rows(step, _rank, rows) {
      const b = await loader.next();
      if (b.step !== step || b.sampleIds.length !== rows) {
        throw new NcclNodeError('ERR_INVALID_ARGUMENT', `POC data: train() asked for step ${step} (${rows} rows), the loader is at step ${b.step} (${b.sampleIds.length} rows): its state was not restored with the checkpoint`);
      }
      ids.set(step, b.sampleIds);
      return vocab.toModel(b.tokens);
    },
    state: () => loader.state(),
    load: (s) => loader.load(s as LoaderState),
  };
}

/** Every rank's ids of steps [from, to), in global order (rank 0's slice first): a collective. */
export async function globalIds(comm: Communicator, d: LoaderData, from: number, to: number): Promise<number[]> {
  const mine: number[][] = [];
  for (let s = from; s < to; s++) mine.push(d.ids.get(s) ?? []);
  const all = await comm.allGatherObject(mine);
  const ids: number[] = [];
  for (let i = 0; i < to - from; i++) for (const r of all) ids.push(...r[i]!);
  return ids;
}

export function sha256Ids(ids: readonly number[]): string {
  return createHash('sha256').update(Uint32Array.from(ids)).digest('hex');
}

/** SHA-256 of the full parameters' float32 bytes, in registration order. */
export function sha256Params(params: readonly Float32Array[]): string {
  const h = createHash('sha256');
  for (const p of params) h.update(new Uint8Array(p.buffer, p.byteOffset, p.byteLength));
  return h.digest('hex');
}
