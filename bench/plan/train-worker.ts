/**
 * One rank of the calibration benchmark: trains an example model data-parallel (DDP,
 * AdamW) for a few steps and reports each step's wall time. TinyLM goes through
 * train() (src/train/loop.ts); GPT, which train() does not build, through the same
 * per-step sequence written out here (zeroGrad, forward/backward with DDP's hooks,
 * finish, step) on the same synthetic corpus.
 */
import { init } from '../../src/comm/init.js';
import { GPT, type GPTConfig } from '../../src/models/gpt/gpt.js';
import { globalBatch, rowsOf } from '../../src/models/tiny-lm/synthetic-corpus.js';
import type { TinyLMConfig } from '../../src/models/tiny-lm/tiny-lm.js';
import { createOptimizer, DistributedDataParallel } from '../../src/runtime/index.js';
import { train } from '../../src/train/loop.js';
import { readPayload, writeResult } from '../../test/helpers/ranks.js';

type Payload = { steps: number; globalBatch: number } & ({ kind: 'tiny-lm'; config: TinyLMConfig } | { kind: 'gpt'; config: GPTConfig });
const p = readPayload<Payload>();
const comm = await init({ backend: 'gloo' });
const optimizer = { kind: 'adamw', lr: 1e-3, weightDecay: 0.01 } as const;
let stepMs: number[];
if (p.kind === 'tiny-lm') {
  const r = await train(comm, { model: p.config, steps: p.steps, globalBatch: p.globalBatch, microBatches: 1, parallel: { kind: 'ddp' }, optimizer, dataSeed: 3 });
  stepMs = r.stepMs;
} else {
  const model = new GPT(p.config);
  const ddp = await DistributedDataParallel.create(comm, model.params, createOptimizer(optimizer), {});
  const rows = p.globalBatch / comm.size, T = p.config.seqLen;
  stepMs = [];
  for (let step = 0; step < p.steps; step++) {
    const t0 = performance.now();
    const mine = rowsOf(globalBatch(step, p.globalBatch, T, p.config.vocab, 3), T, comm.rank * rows, rows);
    ddp.zeroGrad();
    const loss = await model.forwardBackward(mine, rows, { gradScale: 1 / (rows * T), hooks: ddp.hooks });
    await ddp.finish();
    await ddp.step();
    stepMs.push(performance.now() - t0);
    const buf = Float64Array.of(loss / comm.size);
    await comm.allReduce(buf); // the loss, as train() reports it
  }
}
await comm.destroy();
writeResult({ rank: comm.rank, stepMs });
