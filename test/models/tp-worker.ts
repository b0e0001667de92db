/**
 * One rank of a tensor-parallel GPT: `steps` SGD steps on the payload's batches,
 * then reports each step's loss and, per parameter, its shard placement, final
 * data and the last step's gradient (concatenated in params order).
 */
import { init } from '../../src/comm/init.js';
import { TensorParallelGPT } from '../../src/models/gpt/tensor-parallel.js';
import type { GPTConfig } from '../../src/models/gpt/gpt.js';
import { readPayload, writeResult } from '../helpers/ranks.js';

const { cfg, batches, batch, lr, sp } = readPayload<{ cfg: GPTConfig; batches: number[][]; batch: number; lr: number; sp?: boolean }>();
const comm = await init({ backend: 'gloo' });
const model = new TensorParallelGPT(cfg, comm, sp);
const losses: number[] = [];
for (const b of batches) {
  for (const p of model.params) p.grad.fill(0);
  losses.push(await model.forwardBackward(Int32Array.from(b), batch, { gradScale: 1 / (batch * cfg.seqLen) }));
  for (const p of model.params) for (let i = 0; i < p.size; i++) p.data[i] = p.data[i]! - lr * p.grad[i]!;
}
const parts = model.params.flatMap((p) => [p.grad, p.data]);
const all = new Float32Array(parts.reduce((a, x) => a + x.length, 0));
let o = 0;
for (const x of parts) (all.set(x, o), (o += x.length));
writeResult({ losses, params: model.params.map((p) => ({ name: p.name, size: p.size, shard: p.shard })) }, all);
await comm.destroy();
