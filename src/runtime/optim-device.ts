/**
 * The optimizer step on the GPU: the AdamW or SGD the caller configured (its
 * hyper-parameters are read from the host Optimizer given to the runtime), with its
 * state in float32 DeviceBuffers, stepped by the fused kernels in place. No shard
 * leaves the device, and the arithmetic is the host optimizer's, bit for bit
 * (native/kernels/optim_defs.h). State is allocated for every slot up front, so the
 * state dict can hand out views of it at any time, as the host optimizer's does.
 */
import { NcclNodeError } from '../errors.js';
import type { DeviceBuffer } from '../gpu/device-buffer.js';
import { adamw, sgd } from '../gpu/cuda-kernels.js';
import { AdamW, SGD, type Optimizer } from './optim.js';

export interface DeviceSlot {
  /** Stable across steps: the state of this slot is kept under it. */
  key: string;
  param: DeviceBuffer;
  grad: DeviceBuffer;
}

export class DeviceOptimizer {
  readonly #host: AdamW | SGD;
  readonly #names: readonly string[];
  readonly #state = new Map<string, Record<string, DeviceBuffer>>();
  #t: number;

  private constructor(host: AdamW | SGD) {
    this.#host = host;
    this.#names = host instanceof AdamW ? ['exp_avg', 'exp_avg_sq'] : host.o.momentum > 0 ? ['momentum_buffer'] : [];
    this.#t = host.state([]).step;
  }

  /**
   * State for every slot (key, element count), from `zeros` (the device storage's
   * zeroed float32 allocation: zeros are what a first step expects).
   */
  static async create(host: Optimizer, slots: readonly { key: string; size: number }[],
    zeros: (length: number) => Promise<DeviceBuffer>): Promise<DeviceOptimizer> {
    if (!(host instanceof AdamW) && !(host instanceof SGD)) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'the GPU runtime steps AdamW and SGD (from createOptimizer) on the device; received another optimizer');
    }
    const o = new DeviceOptimizer(host);
    for (const { key, size } of slots) {
      const entry: Record<string, DeviceBuffer> = {};
      for (const name of o.#names) entry[name] = await zeros(size);
      o.#state.set(key, entry);
    }
    return o;
  }

  async step(slots: readonly DeviceSlot[]): Promise<void> {
    this.#t += 1;
    const h = this.#host;
    if (h instanceof AdamW) {
      const { lr, beta1, beta2, eps, weightDecay } = h.o;
      const hyper = { lr, beta1, beta2, eps, weightDecay, bc1: 1 - beta1 ** this.#t, bc2: 1 - beta2 ** this.#t };
      await Promise.all(slots.map((s) => {
        const st = this.#slot(s);
        return adamw(s.param, s.grad, st.exp_avg!, st.exp_avg_sq!, hyper);
      }));
    } else {
      await Promise.all(slots.map((s) => sgd(s.param, s.grad, this.#slot(s).momentum_buffer ?? null, h.o)));
    }
  }

  #slot(s: DeviceSlot): Record<string, DeviceBuffer> {
    const st = this.#state.get(s.key);
    if (!st) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `DeviceOptimizer: no state for slot ${s.key}`);
    return st;
  }

  /** The step count and, for the given slots, the live state buffers named `${key}.${state}`. */
  state(slots: readonly { key: string; size: number }[]): { step: number; tensors: Record<string, DeviceBuffer> } {
    const tensors: Record<string, DeviceBuffer> = {};
    for (const { key } of slots) {
      for (const [name, buf] of Object.entries(this.#state.get(key) ?? {})) tensors[`${key}.${name}`] = buf;
    }
    return { step: this.#t, tensors };
  }

  /** Sets the step count (state buffers are filled in place by a checkpoint load). */
  loadState(s: { step: number }): void {
    if (!Number.isInteger(s.step) || s.step < 0) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `DeviceOptimizer.loadState: step must be a non-negative integer, received ${s.step}`);
    }
    this.#t = s.step;
  }

  stateBytes(): number {
    let b = 0;
    for (const entry of this.#state.values()) for (const buf of Object.values(entry)) b += buf.byteLength;
    return b;
  }

  dispose(): void {
    for (const entry of this.#state.values()) for (const buf of Object.values(entry)) buf.dispose();
    this.#state.clear();
  }
}
