/**
 * One rank of device-resume.test.ts. MODE 'device' (NCCL, stand-ins): each run
 * of the payload trains src/train/loop.ts's loop on the device runtime, optionally
 * saving after `saveAt` (and gathering the parameters right then) or starting from
 * a checkpoint. MODE 'host' (Gloo): the host DistributedDataParallel loads a
 * checkpoint with loadTraining() and reports its parameters and optimizer step.
 * Rank 0 writes the parameters as the float32 blob.
 */
import { init } from '../../src/comm/init.js';
import { loadTraining } from '../../src/checkpoint/index.js';
import { DistributedDataParallel } from '../../src/runtime/ddp.js';
import { createOptimizer } from '../../src/runtime/optim.js';
import { TinyLM } from '../../src/models/tiny-lm/tiny-lm.js';
import { train, type CheckpointConfig, type TrainConfig } from '../../src/train/loop.js';
import { concat } from '../runtime/helpers.js';
import { readPayload, writeResult } from '../helpers/ranks.js';

export interface DeviceRun {
  cfg: TrainConfig;
  from?: string;
  saveAt?: { step: number; dir: string };
}

export type Payload = { mode: 'device'; runs: DeviceRun[] } | { mode: 'host'; cfg: TrainConfig; from: string };

const p = readPayload<Payload>();
if (p.mode === 'host') {
  const comm = await init({ backend: 'gloo' });
  const model = new TinyLM(p.cfg.model);
  const optimizer = createOptimizer(p.cfg.optimizer);
  const dp = await DistributedDataParallel.create(comm, model.params, optimizer, { broadcastParams: false });
  const r = await loadTraining(p.from, dp);
  const moments = optimizer.state(model.params.map((q) => ({ key: q.name, size: q.size })));
  // Σ|exp_avg|: zero would mean the moments were not loaded.
  let mass = 0;
  for (const a of Object.values(moments.tensors)) for (const x of a) mass += Math.abs(x);
  writeResult({ step: r.step, optimizerStep: moments.step, momentMass: mass }, comm.rank === 0 ? concat(model.params.map((q) => q.data)) : undefined);
  await comm.destroy();
} else {
  const comm = await init({ backend: 'nccl' });
  if (comm.backend !== 'nccl') throw new Error(`expected the NCCL backend, got ${comm.backend}`);
  const results = [];
  const blobs: Float32Array[] = [];
  for (const run of p.runs) {
    let atSave: Float32Array | undefined;
    let deviceStaging: string | undefined;
    const ckpt: CheckpointConfig | undefined = run.saveAt
      ? {
        dir: run.saveAt.dir, at: [run.saveAt.step], overlap: false,
        // save() resolved: the device pieces are snapshotted, so the next step may overwrite them.
        onSave: async ({ handle, params }) => {
          deviceStaging = handle.deviceStaging;
          atSave = concat(await params());
        },
      }
      : run.from ? { dir: run.from, from: run.from, at: [] } : undefined;
    const r = await train(comm, { ...run.cfg, device: 'cuda', ...(ckpt ? { ckpt } : {}) });
    const params = concat(r.params);
    results.push({ start: r.start, losses: r.losses, deviceStaging, numel: params.length, hasAtSave: !!atSave });
    blobs.push(params, ...(atSave ? [atSave] : []));
  }
  writeResult(results, comm.rank === 0 ? concat(blobs) : undefined);
  await comm.destroy();
}
