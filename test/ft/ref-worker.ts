/**
 * The reference: plain DDP on a plain Gloo world of fixed size (no src/ft code) from
 * a saved state, for steps [from, to): each rank takes its equal slice of the
 * DataLoader's global batches, with the same per-sample noise written out again here.
 * Rank 0 saves the final state (parameters, then AdamW's exp_avg and exp_avg_sq, in
 * parameter order; the step count in JSON) for the next leg of the chain.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { init } from '../../src/comm/init.js';
import { DataLoader } from '../../src/data/index.js';
import { TinyLM } from '../../src/models/tiny-lm/tiny-lm.js';
import { createOptimizer, DistributedDataParallel } from '../../src/runtime/index.js';
import { mulberry32 } from '../../src/util/prng.js';
import { readPayload, report } from '../helpers/ranks.js';
import type { FtPayload } from './worker.js';

const { cfg, from, to, stateIn, stateOut } = readPayload<{ cfg: FtPayload['cfg']; from: number; to: number; stateIn?: string; stateOut: string }>();
const comm = await init({ backend: 'gloo' });
const model = new TinyLM(cfg.model);
const opt = createOptimizer(cfg.optimizer);
const slots = model.params.map((p) => ({ key: p.name, size: p.size }));
const moments = () => {
  const t = opt.state(slots).tensors;
  return model.params.flatMap((p) => [t[`${p.name}.exp_avg`]!, t[`${p.name}.exp_avg_sq`]!]);
};
if (stateIn) {
  const { optimizerStep } = JSON.parse(readFileSync(`${stateIn}.json`, 'utf8')) as { optimizerStep: number };
  const all = new Float32Array(new Uint8Array(readFileSync(`${stateIn}.bin`)).buffer);
  let off = 0;
  for (const a of [...model.params.map((p) => p.data), ...moments()]) {
    a.set(all.subarray(off, off + a.length));
    off += a.length;
  }
  opt.loadState({ step: optimizerStep });
}
const dp = await DistributedDataParallel.create(comm, model.params, opt, { broadcastParams: false });
const G = cfg.globalBatch, T = cfg.model.seqLen, V = cfg.model.vocab, per = G / comm.size;
const loader = await DataLoader.create(cfg.dataset as string, { seqLen: T, globalBatch: G, rank: comm.rank, worldSize: comm.size, seed: cfg.dataSeed });
loader.skip(from);
for (let step = from; step < to; step++) {
  const batch = await loader.next();
  const rows = Int32Array.from(batch.tokens, (t) => t % V);
  for (let r = 0; r < per; r++) {
    const pos = step * G + comm.rank * per + r;
    const rand = mulberry32(Math.imul(cfg.dataSeed ^ 0x5bd1e995, 0x9e3779b1) ^ Math.imul(pos + 1, 0x85ebca6b));
    for (let t = 0; t <= T; t++) if (rand() < (cfg.noise ?? 0)) rows[r * (T + 1) + t] = Math.floor(rand() * V);
  }
  dp.zeroGrad();
  await model.forwardBackward(rows, per, { gradScale: 1 / (per * T), hooks: dp.hooks });
  await dp.finish();
  if (cfg.clipNorm) await dp.clipGradNorm(cfg.clipNorm);
  await dp.step();
  report({ step, ids: batch.sampleIds, rank: comm.rank });
}
if (comm.rank === 0) {
  const arrays = [...model.params.map((p) => p.data), ...moments()];
  const all = new Float32Array(arrays.reduce((a, x) => a + x.length, 0));
  let off = 0;
  for (const a of arrays) {
    all.set(a, off);
    off += a.length;
  }
  writeFileSync(`${stateOut}.bin`, new Uint8Array(all.buffer));
  writeFileSync(`${stateOut}.json`, JSON.stringify({ optimizerStep: opt.state([]).step, step: to }));
}
await loader.close();
await comm.destroy();
