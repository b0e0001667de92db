/**
 * One rank of the finetune test: a tiny pretrain with train() (FSDP ZeRO-3, a
 * checkpoint at the end), then finetuneStage from that checkpoint.
 */
import { join } from 'node:path';
import { init } from '../../src/comm/init.js';
import { latest } from '../../src/checkpoint/index.js';
import { finetuneStage } from '../../src/poc/finetune.js';
import { additionProblems, corpusText, solved } from '../../src/poc/tasks.js';
import { CompactVocab } from '../../src/poc/vocab.js';
import { train } from '../../src/train/loop.js';
import { mulberry32 } from '../../src/util/prng.js';
import { readPayload, writeResult } from '../helpers/ranks.js';

const { dir, pretrainSteps, finetuneSteps } = readPayload<{ dir: string; pretrainSteps: number; finetuneSteps: number }>();
const comm = await init({ backend: 'gloo' });
const problems = additionProblems({ maxOperand: 9, seed: 5 });
const docs = corpusText({ problems, bytes: 30_000, seed: 5 });
const vocab = await CompactVocab.build('cl100k_base', { texts: [...docs, ...problems.heldOut.map(solved)] });
if (comm.rank === 0) await vocab.write(join(dir, 'vocab.json'));
const stream = vocab.encode(docs.join(''));
const model = { vocab: vocab.size, dim: 32, hidden: 64, layers: 2, seqLen: 16, seed: 5 };
const W = model.seqLen + 1;
const pre = await train(comm, {
  model, steps: pretrainSteps, globalBatch: 8, microBatches: 1, parallel: { kind: 'fsdp', stage: 3 }, optimizer: { kind: 'adamw', lr: 1e-2 }, clipNorm: 1, dataSeed: 5,
  data: {
    rows: (step, rank, rows) => {
      const out = new Int32Array(rows * W);
      for (let i = 0; i < rows; i++) {
        const at = Math.floor(mulberry32(step * 1000 + rank * rows + i)() * (stream.length - W));
        out.set(stream.subarray(at, at + W), i * W);
      }
      return out;
    },
  },
  ckpt: { dir: join(dir, 'pre'), at: [pretrainSteps] },
});
const from = await comm.broadcastObject(comm.rank === 0 ? (await latest(join(dir, 'pre')))! : '', { root: 0 });
const result = await finetuneStage(comm, { from, ckptDir: join(dir, 'ft'), model, vocab, problems, steps: finetuneSteps, globalBatch: 16, lr: 1e-2, minAccuracy: 0.1 });
writeResult({ rank: comm.rank, from, model, pretrainLosses: pre.losses, result });
await comm.destroy();
