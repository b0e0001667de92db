/**
 * The reference for elastic HSDP: plain hybrid sharding on a fixed Gloo world (no
 * src/ft code): DeviceMesh { dp: S, replicate: world / S }, FSDP ZeRO-3 over the dp
 * group with the replicate group for the cross-replica all-reduce, for steps [from,
 * to) from a saved state. Rank r takes the r-th equal slice of the DataLoader's global
 * batch, with the per-sample noise written out again here. Each rank saves its shard
 * (parameters, AdamW moments, step count) as an in-memory checkpoint frame for the next
 * leg; the leg's last ranks report the full gathered parameters.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fillFrame, fillTargets, planFrame, readFrame } from '../../src/checkpoint/in-memory-frame.js';
import { init } from '../../src/comm/init.js';
import { DataLoader } from '../../src/data/index.js';
import { TinyLM } from '../../src/models/tiny-lm/tiny-lm.js';
import { DeviceMesh } from '../../src/runtime/mesh.js';
import { createOptimizer, FullyShardedDataParallel } from '../../src/runtime/index.js';
import { mulberry32 } from '../../src/util/prng.js';
import { readPayload, report, writeResult } from '../helpers/ranks.js';
import { concat } from '../runtime/helpers.js';
import type { HsdpPayload } from './hsdp-worker.js';

const { cfg, from, to, stateIn, stateOut } = readPayload<{ cfg: HsdpPayload['cfg']; from: number; to: number; stateIn?: string; stateOut: string }>();
const S = cfg.hsdp.shard;
const world = await init({ backend: 'gloo' });
const mesh = await DeviceMesh.create(world, { dp: S, replicate: world.size / S });
const model = new TinyLM(cfg.model);
const opt = createOptimizer(cfg.optimizer);
const fsdp = await FullyShardedDataParallel.create(mesh.get('dp'), model.units, opt, { stage: 3, replicate: mesh.get('replicate'), broadcastParams: false });
if (stateIn) {
  const frame = new Uint8Array(readFileSync(`${stateIn}.${mesh.coord('dp')}`));
  const meta = readFrame(frame, 'reference leg state');
  await fsdp.loadStateDict(async (targets) => {
    await fillTargets(targets, [{ meta, frame }]);
    return { optimizerStep: meta.train.optimizerStep as number };
  });
}
const G = cfg.globalBatch, T = cfg.model.seqLen, V = cfg.model.vocab, per = G / world.size;
const loader = await DataLoader.create(cfg.dataset as string, { seqLen: T, globalBatch: G, rank: world.rank, worldSize: world.size, seed: cfg.dataSeed });
loader.skip(from);
for (let step = from; step < to; step++) {
  const batch = await loader.next();
  const rows = Int32Array.from(batch.tokens, (t) => t % V);
  for (let r = 0; r < per; r++) {
    const pos = step * G + world.rank * per + r;
    const rand = mulberry32(Math.imul(cfg.dataSeed ^ 0x5bd1e995, 0x9e3779b1) ^ Math.imul(pos + 1, 0x85ebca6b));
    for (let t = 0; t <= T; t++) if (rand() < (cfg.noise ?? 0)) rows[r * (T + 1) + t] = Math.floor(rand() * V);
  }
  fsdp.zeroGrad();
  await model.forwardBackward(rows, per, { gradScale: 1 / (per * T), hooks: fsdp.hooks });
  await fsdp.finish();
  if (cfg.clipNorm) await fsdp.clipGradNorm(cfg.clipNorm);
  await fsdp.step();
  report({ step, ids: batch.sampleIds, rank: world.rank });
}
const sd = fsdp.stateDict();
const state = { tensors: sd.tensors, train: { step: to, optimizerStep: sd.optimizerStep } };
// Replica 0 saves each shard index once.
if (mesh.coord('replicate') === 0) writeFileSync(`${stateOut}.${mesh.coord('dp')}`, await fillFrame(planFrame(state, mesh.coord('dp'), S), state));
const full = concat(await fsdp.gatherParams());
writeResult({ rank: world.rank }, full);
await loader.close();
await world.destroy();
