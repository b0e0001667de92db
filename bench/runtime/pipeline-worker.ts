/**
 * One pipeline stage for bench/runtime/pipeline.ts: runs `steps` steps (after one
 * warm-up) of the named schedule and reports per step the wall time and the time
 * this stage spent computing (inside forward/backward), the rest being its bubble
 * and communication.
 */
import { init } from '../../src/comm/init.js';
import { GPT, type GPTConfig } from '../../src/models/gpt/gpt.js';
import { GPTPipelineStage } from '../../src/models/gpt/gpt-pipeline-stage.js';
import { Pipeline, schedule, type ScheduleName } from '../../src/runtime/pipeline.js';
import { readPayload, writeResult } from '../../test/helpers/ranks.js';

const { cfg, name, micro, rows, steps, chunks = 1 } = readPayload<{ cfg: GPTConfig; name: ScheduleName; micro: number; rows: number; steps: number; chunks?: number }>();
const comm = await init({ backend: 'gloo' });
const pipe = await Pipeline.create(comm, { chunks });
const model = new GPT(cfg);
const width = cfg.seqLen + 1;
const tokens = Int32Array.from({ length: micro * rows * width }, (_, i) => (i * 7919) % cfg.vocab);
const batches = Array.from({ length: micro }, (_, m) => tokens.subarray(m * rows * width, (m + 1) * rows * width));
const wall: number[] = [], busy: number[] = [];
for (let step = -1; step < steps; step++) {
  const stage = new GPTPipelineStage(model, pipe.stage, pipe.stages, batches, rows, 1 / (micro * rows * cfg.seqLen), chunks);
  let inside = 0;
  const timed = <A extends unknown[], R>(f: (...a: A) => Promise<R>) => async (...a: A): Promise<R> => {
    const t = performance.now();
    try {
      return await f(...a);
    } finally {
      inside += performance.now() - t;
    }
  };
  stage.forward = timed(stage.forward.bind(stage));
  stage.backward = timed(stage.backward.bind(stage));
  const weight = stage.weight.bind(stage);
  stage.weight = (m, c) => void timed(async () => weight(m, c))(); // synchronous: timed before it returns
  await comm.barrier();
  const t0 = performance.now();
  await pipe.run(schedule(name, pipe.stages, pipe.stage, micro, chunks), stage);
  await comm.barrier();
  if (step >= 0) (wall.push(performance.now() - t0), busy.push(inside));
}
writeResult({ wall, busy });
await pipe.destroy();
await comm.destroy();
