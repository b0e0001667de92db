/**
 * TinyLM on the GPU runtime. TinyLM computes on host arrays, so DeviceTinyLM
 * mirrors its parameters in DeviceBuffers owned by the device runtime: before a
 * unit's forward it copies the unit's device parameters into the model, and as
 * gradients become final it adds the model's host gradients into the device
 * gradients, then calls the runtime's hook. Every collective, the bucketing,
 * sharding, casts, clipping and the optimizer step stay on the device.
 */
import { DeviceBuffer } from '../../index.js';
import type { DeviceParam, ModelHooks } from '../../runtime/index.js';
import type { Param } from './tiny-lm.js';

/** What is mirrored: any model whose forward calls the runtime's hooks per unit (TinyLM, GPT). */
interface HookedModel { readonly params: Param[]; readonly units: Param[][] }

export class DeviceTinyLM {
  /** Device parameters in registration order, with the model's shapes (what checkpoints record). */
  readonly params: DeviceParam[] = [];
  readonly #of = new Map<Param, DeviceParam>();
  /** Host->device gradient pushes run in hook order; the runtime hook follows each. */
  #q: Promise<void> = Promise.resolve();

  private constructor(readonly model: HookedModel) {}

  static async create(model: HookedModel): Promise<DeviceTinyLM> {
    const m = new DeviceTinyLM(model);
    for (const p of model.params) {
      const d: DeviceParam = { name: p.name, size: p.size, shape: p.shape, data: await DeviceBuffer.from(p.data), grad: await DeviceBuffer.from(new Float32Array(p.size)) };
      m.params.push(d);
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
        // DDP has no afterBackward: its gradients are pushed one by one in gradReady.
        if (rt.afterBackward) this.#q = this.#q.then(() => push(this.model.units[u]!)).then(() => rt.afterBackward!(u));
      },
      gradReady: (p) => {
        if (rt.gradReady) this.#q = this.#q.then(() => push([p as Param])).then(() => rt.gradReady!(this.#of.get(p as Param)!));
      },
    };
  }

  /** Waits for the pushes of the last backward, then clears the host gradients for the next one. */
  async flush(): Promise<void> {
    await this.#q;
    for (const p of this.model.params) p.grad.fill(0);
  }

  /** The device parameters' values on the host (DDP: every rank holds them whole). */
  toHost(): Promise<Float32Array[]> {
    return Promise.all(this.params.map(async (p) => (await p.data!.toHost()) as Float32Array));
  }
}
