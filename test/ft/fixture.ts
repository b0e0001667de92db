/** The elastic tests' corpus, model and comparisons. */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { prepare, epochOrder } from '../../src/data/index.js';
import { mulberry32 } from '../../src/util/prng.js';
import { runRanks, describeRanks, type RankResult } from '../helpers/ranks.js';
import type { FtPayload } from './worker.js';

export const SAMPLES = 60;
export const SEQ = 8;

/** A prepared corpus of SAMPLES samples of SEQ + 1 tokens (random gpt2 ids). */
export async function corpus(): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'nccl-node-ft-'));
  const rand = mulberry32(11);
  const tokens = Uint16Array.from({ length: SAMPLES * SEQ + 1 }, () => Math.floor(rand() * 50000));
  writeFileSync(join(dir, 'train.bin'), tokens);
  await prepare({ tokenizer: 'gpt2', out: join(dir, 'ds'), files: [join(dir, 'train.bin')] });
  return join(dir, 'ds');
}

export function config(dataset: string, steps: number): FtPayload['cfg'] {
  return {
    model: { vocab: 61, dim: 16, hidden: 37, layers: 2, seqLen: SEQ, seed: 5 },
    steps,
    globalBatch: 12,
    optimizer: { kind: 'adamw', lr: 0.01 },
    clipNorm: 1,
    dataset,
    dataSeed: 3,
    noise: 0.1,
  };
}

/** Runs the plain-DDP reference legs in turn: [{size, from, to}], each from the previous leg's state. */
export async function referenceChain(cfg: FtPayload['cfg'], legs: { size: number; from: number; to: number }[]): Promise<{ params: Float32Array; ids: Map<number, number[]> }> {
  const dir = mkdtempSync(join(tmpdir(), 'nccl-node-ft-ref-'));
  const ids = new Map<number, number[]>();
  let stateIn: string | undefined;
  for (const [i, leg] of legs.entries()) {
    const stateOut = join(dir, `leg${i}`);
    const rs = await runRanks('test/ft/ref-worker.ts', leg.size, { payload: { cfg, from: leg.from, to: leg.to, stateIn, stateOut }, check: true, timeoutMs: 40_000 });
    for (const r of rs) for (const rep of r.reports) ids.set(rep.step as number, [...(ids.get(rep.step as number) ?? []), ...(rep.ids as number[])]);
    stateIn = stateOut;
  }
  const all = new Float32Array(new Uint8Array(readFileSync(`${stateIn}.bin`)).buffer);
  return { params: all, ids };
}

/** Every committed step's ids over all ranks of the generation that committed it. */
export function committedIds(results: RankResult[]): Map<number, number[]> {
  const byStep = new Map<number, { gen: number; ids: number[] }>();
  for (const r of results) {
    for (const rep of r.reports) {
      if (rep.step === undefined || rep.gen === undefined) continue;
      const step = rep.step as number, gen = rep.gen as number;
      const cur = byStep.get(step);
      if (!cur || cur.gen < gen) byStep.set(step, { gen, ids: [...(rep.ids as number[])] });
      else if (cur.gen === gen) cur.ids.push(...(rep.ids as number[]));
    }
  }
  return new Map([...byStep].map(([s, v]) => [s, v.ids]));
}

/** The DataLoader's global order, written out from its definition: epoch e's permutation of [0, SAMPLES). */
export function expectedIds(steps: number, seed: number, globalBatch: number): number[] {
  const out: number[] = [];
  for (let p = 0; p < steps * globalBatch; p++) out.push(epochOrder(SAMPLES, seed, Math.floor(p / SAMPLES))[p % SAMPLES]!);
  return out;
}

export { describeRanks };
