/**
 * examples/train.ts's loop on the GPU path: parameters and gradients live in
 * DeviceBuffers owned by the device runtime (ddp-device.ts / fsdp-device.ts) and
 * every collective runs through the NCCL communicator. TinyLM computes on host
 * arrays, so DeviceModel mirrors it: before a unit's forward it copies the unit's
 * device parameters to the model, and as gradients become final it adds the
 * model's host gradients into the device gradients, then calls the runtime's
 * hook. On the stand-ins device memory is host memory, so this costs little; what
 * the test exercises is the runtime's device-side bucketing, sharding and casts.
 */
import { existsSync, readFileSync } from 'node:fs';
import type { Communicator } from '../../src/comm/communicator.js';
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

class DeviceModel {
  readonly dev: DeviceParam[] = [];
  readonly #of = new Map<Param, DeviceParam>();
  /** Host->device gradient pushes run in hook order; the runtime hook follows each. */
  #q: Promise<void> = Promise.resolve();

  private constructor(readonly model: TinyLM) {}

  static async create(model: TinyLM): Promise<DeviceModel> {
    const m = new DeviceModel(model);
    for (const p of model.params) {
      const d: DeviceParam = { name: p.name, size: p.size, data: await DeviceBuffer.from(p.data), grad: await DeviceBuffer.from(new Float32Array(p.size)) };
      m.dev.push(d);
      m.#of.set(p, d);
    }
    return m;
  }

  get units(): DeviceParam[][] {
    return this.model.units.map((ps) => ps.map((p) => this.#of.get(p)!));
  }

  /** Hooks for TinyLM that keep the host mirror and the runtime's device buffers in step. */
  hooks(rt: ModelHooks<DeviceParam>): ModelHooks {
    const push = (ps: Param[]) => Promise.all(ps.map(async (p) => {
      const g = this.#of.get(p)!.grad!;
      const acc = (await g.toHost()) as Float32Array;
      for (let i = 0; i < acc.length; i++) acc[i] = acc[i]! + p.grad[i]!;
      await g.copyFrom(acc);
    }));
    const pull = (ps: Param[]) => Promise.all(ps.map(async (p) => void (await this.#of.get(p)!.data!.copyTo(p.data))));
    return {
      beforeForward: async (u) => {
        await this.#q;
        await rt.beforeForward?.(u);
        await pull(this.model.units[u]!);
      },
      afterForward: (u) => rt.afterForward?.(u),
      beforeBackward: async (u) => {
        await this.#q;
        await rt.beforeBackward?.(u);
      },
      afterBackward: (u) => {
        const ps = this.model.units[u]!;
        // DDP has no afterBackward: its gradients are pushed one by one in gradReady.
        if (!rt.afterBackward) return;
        this.#q = this.#q.then(() => push(ps)).then(() => rt.afterBackward!(u));
      },
      gradReady: (p) => {
        if (!rt.gradReady) return;
        this.#q = this.#q.then(() => push([p as Param])).then(() => rt.gradReady!(this.#of.get(p as Param)!));
      },
    };
  }

  /** Waits for the pushes of the last backward, then clears the host gradients for the next one. */
  async flush(): Promise<void> {
    await this.#q;
    for (const p of this.model.params) p.grad.fill(0);
  }
}

export interface GpuRun {
  losses: number[];
  gradNorms: number[];
  params: Float32Array[];
  dp: DeviceDataParallel;
  /** The largest device-to-host copy during finish + clip + step (0 without the stand-in trace). */
  stepDtoHMax: number;
}

export async function trainOnDevice(comm: Communicator, cfg: TrainConfig): Promise<GpuRun> {
  const model = new TinyLM(cfg.model);
  const dm = await DeviceModel.create(model);
  const optimizer = createOptimizer(cfg.optimizer);
  const { kind, ...opts } = cfg.parallel;
  const dp: DeviceDataParallel = kind === 'ddp'
    ? await DeviceDistributedDataParallel.create(comm, dm.dev, optimizer, opts as DDPOptions)
    : await DeviceFullyShardedDataParallel.create(comm, dm.units, optimizer, opts as FSDPOptions);
  const hooks = dm.hooks(dp.hooks);
  const rowsPerRank = cfg.globalBatch / comm.size;
  const microRows = rowsPerRank / cfg.microBatches;
  if (!Number.isInteger(microRows)) throw new Error(`globalBatch ${cfg.globalBatch} must divide by ${comm.size} ranks x ${cfg.microBatches} micro-batches`);
  const T = cfg.model.seqLen;
  const gradScale = 1 / (microRows * T * cfg.microBatches);
  const losses: number[] = [], gradNorms: number[] = [];
  let stepDtoHMax = 0; // the largest device-to-host copy of finish + clip + step (stand-in trace)
  const lossBuf = DeviceBuffer.alloc({ dtype: 'float64', length: 1 });
  for (let step = 0; step < cfg.steps; step++) {
    const batch = globalBatch(step, cfg.globalBatch, T, cfg.model.vocab, cfg.dataSeed);
    dp.zeroGrad();
    let loss = 0;
    for (let m = 0; m < cfg.microBatches; m++) {
      dp.setRequiresGradSync(m === cfg.microBatches - 1);
      const rows = rowsOf(batch, T, comm.rank * rowsPerRank + m * microRows, microRows);
      loss += (await model.forwardBackward(rows, microRows, { gradScale, hooks })) / cfg.microBatches;
      await dm.flush();
    }
    const traced = dtohTrace();
    await dp.finish();
    gradNorms.push(cfg.clipNorm ? await dp.clipGradNorm(cfg.clipNorm) : NaN);
    await dp.step();
    stepDtoHMax = Math.max(stepDtoHMax, ...traced());
    await lossBuf.copyFrom(new Float64Array([loss / comm.size]));
    await comm.allReduce(lossBuf, { op: 'sum' });
    losses.push(((await lossBuf.toHost()) as Float64Array)[0]!);
  }
  const params = dp instanceof DeviceFullyShardedDataParallel
    ? await dp.gatherParams()
    : await Promise.all(dm.dev.map(async (p) => (await p.data!.toHost()) as Float32Array));
  return { losses, gradNorms, params, dp, stepDtoHMax };
}

/**
 * Sizes of the device-to-host copies made from now until the returned function is
 * called, from the stand-in libcuda's trace (CUDA_STANDIN_DTOH_TRACE); [] without it.
 */
function dtohTrace(): () => number[] {
  const base = process.env.CUDA_STANDIN_DTOH_TRACE;
  if (!base) return () => [];
  const file = `${base}.${process.pid}`;
  const read = () => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).map(Number) : []);
  const before = read().length;
  return () => read().slice(before);
}
