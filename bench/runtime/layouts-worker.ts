/**
 * One rank for bench/runtime/layouts.ts. Two modes:
 *   'train3d'   `steps` steps of train3d at the payload's layout; reports what the
 *               rank held (train3d's memory report), its stage and each step's wall time
 *   'tp'        the whole world is one tensor-parallel group: one warm-up and `steps`
 *               forward/backward passes of TensorParallelGPT, reporting each pass's
 *               time and the collectives' bytes and time by kind (all of them are the
 *               model's TP collectives: nothing else runs on the communicator)
 */
import { init } from '../../src/comm/init.js';
import { collectiveTotals, type CollectiveTotals } from '../../src/metrics/index.js';
import type { GPTConfig } from '../../src/models/gpt/gpt.js';
import { TensorParallelGPT } from '../../src/models/gpt/tensor-parallel.js';
import { train3d, type Train3DConfig } from '../../src/train/train3d.js';
import { readPayload, writeResult } from '../../test/helpers/ranks.js';

type Payload =
  | { mode: 'train3d'; cfg: Omit<Train3DConfig, 'batch' | 'log'> }
  | { mode: 'tp'; model: GPTConfig; rows: number; steps: number; sequenceParallel: boolean };

const payload = readPayload<Payload>();
const comm = await init({ backend: 'gloo' });
const tokensFor = (model: GPTConfig, rows: number, salt: number) =>
  Int32Array.from({ length: rows * (model.seqLen + 1) }, (_, i) => ((i + salt) * 7919) % model.vocab);

if (payload.mode === 'train3d') {
  const { cfg } = payload;
  const stepMs: number[] = [];
  let last = performance.now();
  const r = await train3d(comm, {
    ...cfg,
    batch: (s) => tokensFor(cfg.model, cfg.globalBatch, s),
    log: () => {
      const now = performance.now();
      stepMs.push(now - last);
      last = now;
    },
  });
  writeResult({ coords: r.mesh.coords, memory: r.memory, paramElements: r.params.reduce((a, p) => a + p.size, 0), stepMs });
} else {
  const { model: cfg, rows, steps, sequenceParallel } = payload;
  const model = new TensorParallelGPT(cfg, comm, sequenceParallel);
  const tokens = tokensFor(cfg, rows, 0);
  const pass = async () => {
    for (const p of model.params) p.grad.fill(0);
    await model.forwardBackward(tokens, rows, { gradScale: 1 / (rows * cfg.seqLen) });
  };
  await pass();
  await comm.barrier();
  const before = collectiveTotals();
  const passMs: number[] = [];
  for (let s = 0; s < steps; s++) {
    const t = performance.now();
    await pass();
    passMs.push(performance.now() - t);
  }
  const after = collectiveTotals();
  const delta: Record<string, CollectiveTotals> = {};
  for (const [kind, t] of Object.entries(after)) {
    const b = before[kind] ?? { calls: 0, bytes: 0, seconds: 0 };
    if (t.calls > b.calls) delta[kind] = { calls: (t.calls - b.calls) / steps, bytes: (t.bytes - b.bytes) / steps, seconds: (t.seconds - b.seconds) / steps };
  }
  writeResult({ passMs, perPass: delta });
}
await comm.destroy();
