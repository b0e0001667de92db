/**
 * One stage of a pipeline-parallel GPT: `steps` SGD steps of the payload's global
 * batch cut into micro-batches, run by the named schedule. Reports the losses (last
 * stage), the most micro-batches it held at once, and per parameter of the stage
 * its last gradient and final data (concatenated in the stage's order).
 */
import { init } from '../../src/comm/init.js';
import { GPT, type GPTConfig } from '../../src/models/gpt/gpt.js';
import { GPTPipelineStage } from '../../src/models/gpt/gpt-pipeline-stage.js';
import { Pipeline, schedule, type ScheduleName } from '../../src/runtime/pipeline.js';
import { readPayload, writeResult } from '../helpers/ranks.js';

const { cfg, tokens, batch, micro, steps, lr, name, chunks = 1, recompute = false } = readPayload<{
  cfg: GPTConfig; tokens: number[]; batch: number; micro: number; steps: number; lr: number; name: ScheduleName; chunks?: number; recompute?: boolean;
}>();
const comm = await init({ backend: 'gloo' });
const pipe = await Pipeline.create(comm, { chunks });
const model = new GPT(cfg);
const rows = batch / micro, width = cfg.seqLen + 1;
const all = Int32Array.from(tokens);
const microBatches = Array.from({ length: micro }, (_, m) => all.subarray(m * rows * width, (m + 1) * rows * width));
const losses: number[] = [];
let held = 0, heldElements = 0;
let params: GPTPipelineStage<{ out: Float32Array }>['params'] = [];
for (let step = 0; step < steps; step++) {
  const stage = new GPTPipelineStage(model, pipe.stage, pipe.stages, microBatches, rows, 1 / (batch * cfg.seqLen), chunks, recompute);
  params = stage.params;
  for (const p of params) p.grad.fill(0);
  const forward = stage.forward.bind(stage);
  stage.forward = async (m, input, chunk) => {
    const out = await forward(m, input, chunk);
    held = Math.max(held, stage.inFlight);
    heldElements = Math.max(heldElements, stage.savedElements);
    return out;
  };
  await pipe.run(schedule(name, pipe.stages, pipe.stage, micro, chunks), stage);
  if (pipe.stage === pipe.stages - 1) losses.push(stage.losses.reduce((a, b) => a + b, 0) / (batch * cfg.seqLen));
  for (const p of params) for (let i = 0; i < p.size; i++) p.data[i] = p.data[i]! - lr * p.grad[i]!;
}
const parts = params.flatMap((p) => [p.grad, p.data]);
const out = new Float32Array(parts.reduce((a, x) => a + x.length, 0));
let o = 0;
for (const x of parts) (out.set(x, o), (o += x.length));
writeResult({ losses, held, heldElements, params: params.map((p) => ({ name: p.name, size: p.size })) }, out);
await pipe.destroy();
await comm.destroy();
