/**
 * A checkpointable version of test/runtime/gpu-train.ts's loop: TinyLM on the
 * device runtime (DeviceBuffers, NCCL), able to save with trainingState() after
 * a given step and to start from a checkpoint with loadTraining(). The host
 * mirror works as in gpu-train.ts: the model computes on host arrays copied from
 * the device parameters before each unit's forward, and its host gradients are
 * added into the device gradients before each runtime hook. DeviceParams carry
 * the model's shapes, so checkpoints record the same global shapes as the host path.
 */
import type { Communicator } from '../../src/comm/communicator.js';
import { Checkpointer, loadTraining, trainingState } from '../../src/checkpoint/index.js';
import { DeviceBuffer } from '../../src/gpu/device-buffer.js';
import { DeviceDistributedDataParallel, type DeviceDataParallel } from '../../src/runtime/ddp-device.js';
import type { DeviceParam } from '../../src/runtime/device.js';
import { DeviceFullyShardedDataParallel } from '../../src/runtime/fsdp-device.js';
import { createOptimizer } from '../../src/runtime/optim.js';
import type { DDPOptions, FSDPOptions } from '../../src/runtime/options.js';
import type { ModelHooks } from '../../src/runtime/types.js';
import type { TrainConfig } from '../../examples/train.js';
import { globalBatch, rowsOf } from '../../examples/tiny-lm/data.js';
import { TinyLM, type Param } from '../../examples/tiny-lm/model.js';

type ShapedParam = DeviceParam & { readonly shape: readonly number[] };

async function mirror(model: TinyLM): Promise<Map<Param, ShapedParam>> {
  const of = new Map<Param, ShapedParam>();
  for (const p of model.params) {
    of.set(p, { name: p.name, size: p.size, shape: p.shape, data: await DeviceBuffer.from(p.data), grad: await DeviceBuffer.from(new Float32Array(p.size)) });
  }
  return of;
}

/** TinyLM hooks that keep the host arrays and the runtime's device buffers in step (as gpu-train.ts). */
function bridge(model: TinyLM, of: Map<Param, ShapedParam>, rt: ModelHooks<DeviceParam>): { hooks: ModelHooks; flush: () => Promise<void> } {
  let q: Promise<void> = Promise.resolve();
  const push = (ps: Param[]) => Promise.all(ps.map(async (p) => {
    const g = of.get(p)!.grad!;
    const acc = (await g.toHost()) as Float32Array;
    for (let i = 0; i < acc.length; i++) acc[i] = acc[i]! + p.grad[i]!;
    await g.copyFrom(acc);
  }));
  const pull = (ps: Param[]) => Promise.all(ps.map(async (p) => void (await of.get(p)!.data!.copyTo(p.data))));
  const hooks: ModelHooks = {
    beforeForward: async (u) => {
      await q;
      await rt.beforeForward?.(u);
      await pull(model.units[u]!);
    },
    afterForward: (u) => rt.afterForward?.(u),
    beforeBackward: async (u) => {
      await q;
      await rt.beforeBackward?.(u);
    },
    afterBackward: (u) => {
      if (rt.afterBackward) q = q.then(() => push(model.units[u]!)).then(() => rt.afterBackward!(u));
    },
    gradReady: (p) => {
      if (rt.gradReady) q = q.then(() => push([p as Param])).then(() => rt.gradReady!(of.get(p as Param)!));
    },
  };
  const flush = async () => {
    await q;
    for (const p of model.params) p.grad.fill(0);
  };
  return { hooks, flush };
}

export interface CkptRun {
  /** Step the loop started at (0, or the checkpoint's). */
  start: number;
  /** Loss of each step run, from `start`. */
  losses: number[];
  /** Full parameters after the last step, concatenated in model order. */
  params: Float32Array;
  /** Full parameters right after the save (when `saveAt` was given). */
  paramsAtSave?: Float32Array;
  deviceStaging?: string;
}

async function fullParams(dp: DeviceDataParallel, of: Map<Param, ShapedParam>): Promise<Float32Array[]> {
  if (dp instanceof DeviceFullyShardedDataParallel) return dp.gatherParams();
  return Promise.all([...of.values()].map(async (p) => (await p.data!.toHost()) as Float32Array));
}

const cat = (as: Float32Array[]) => {
  const out = new Float32Array(as.reduce((a, x) => a + x.length, 0));
  as.reduce((o, a) => (out.set(a, o), o + a.length), 0);
  return out;
};

/** Trains cfg.steps steps (from a checkpoint in `from`, else from scratch), saving into `saveAt.dir` after step `saveAt.step`. */
export async function trainCheckpointed(comm: Communicator, cfg: TrainConfig, o: { from?: string; saveAt?: { step: number; dir: string } } = {}): Promise<CkptRun> {
  const model = new TinyLM(cfg.model);
  const of = await mirror(model);
  const optimizer = createOptimizer(cfg.optimizer);
  const { kind, ...opts } = cfg.parallel;
  const dev = [...of.values()];
  const dp: DeviceDataParallel = kind === 'ddp'
    ? await DeviceDistributedDataParallel.create(comm, dev, optimizer, opts as DDPOptions)
    : await DeviceFullyShardedDataParallel.create(comm, model.units.map((ps) => ps.map((p) => of.get(p)!)), optimizer, opts as FSDPOptions);
  const { hooks, flush } = bridge(model, of, dp.hooks);
  const start = o.from ? (await loadTraining(o.from, dp)).step : 0;
  const ck = o.saveAt ? await Checkpointer.create(o.saveAt.dir, { comm }) : null;
  const rowsPerRank = cfg.globalBatch / comm.size;
  const T = cfg.model.seqLen;
  const out: CkptRun = { start, losses: [], params: new Float32Array(0) };
  const lossBuf = DeviceBuffer.alloc({ dtype: 'float64', length: 1 });
  for (let step = start; step < cfg.steps; step++) {
    const batch = globalBatch(step, cfg.globalBatch, T, cfg.model.vocab, cfg.dataSeed);
    dp.zeroGrad();
    const loss = await model.forwardBackward(rowsOf(batch, T, comm.rank * rowsPerRank, rowsPerRank), rowsPerRank, { gradScale: 1 / (rowsPerRank * T), hooks });
    await flush();
    await dp.finish();
    await dp.step();
    await lossBuf.copyFrom(new Float64Array([loss / comm.size]));
    await comm.allReduce(lossBuf, { op: 'sum' });
    out.losses.push(((await lossBuf.toHost()) as Float64Array)[0]!);
    if (ck && step + 1 === o.saveAt!.step) {
      // save() resolves once the device pieces are snapshotted; the next step overwrites them at once.
      const h = await ck.save(trainingState(dp, { step: step + 1 }), { async: true });
      out.deviceStaging = h.deviceStaging;
      out.paramsAtSave = cat(await fullParams(dp, of));
      await h.committed;
    }
  }
  await ck?.close();
  out.params = cat(await fullParams(dp, of));
  return out;
}
