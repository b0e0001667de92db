/**
 * A GPT stage (GPT or TensorParallelGPT, the Params of one pipeline stage) on the
 * device runtime. What is on the device: the parameters, their gradients and
 * the optimizer state live in DeviceBuffers that the device storage owns
 * (runtime/device-storage.ts), and the data-parallel reduction (all-reduce, or
 * ZeRO's reduce-scatter and all-gathers), the gradient norm, clipping and the
 * optimizer step run there as NCCL collectives and kernels (train/dp-optimizer.ts).
 *
 * What computes on a host mirror: the layers themselves (matmuls, attention,
 * norms, GELU, cross-entropy). The GPT has no device kernels, so, as DeviceTinyLM
 * does for TinyLM, the model's own Params are a host mirror: pull() copies the
 * device parameters into it before a step, the forward and backward of every
 * micro-batch run on it (their tensor-parallel collectives and pipeline sends
 * staged through DeviceBuffers over NCCL: runtime/host-staged-comm.ts), and
 * push() copies the gradients they accumulated into the device gradients.
 */
import { DeviceBuffer } from '../../gpu/device-buffer.js';
import type { DeviceParam } from '../../runtime/device-storage.js';
import type { Param } from '../tiny-lm/tiny-lm.js';

const RELEASED = new Float32Array(0);

export class DeviceGPT {
  /** Device parameters in the order of `host`, with its names and shapes. */
  readonly params: DeviceParam[] = [];

  private constructor(readonly host: readonly Param[]) {}

  /** Device copies of the host Params' initial values; gradients are left to the optimizer (null until it zeroes them). */
  static async create(host: readonly Param[]): Promise<DeviceGPT> {
    const m = new DeviceGPT(host);
    for (const p of host) m.params.push({ name: p.name, size: p.size, shape: p.shape, data: await DeviceBuffer.from(p.data), grad: null });
    return m;
  }

  /** The device parameters into the host mirror (allocated again if released), and the mirror's gradients zeroed. */
  async pull(): Promise<void> {
    await Promise.all(this.host.map(async (p, i) => {
      if (p.data.length !== p.size) p.data = new Float32Array(p.size);
      await this.params[i]!.data!.copyTo(p.data);
      if (p.grad.length === p.size) p.grad.fill(0);
      else p.grad = new Float32Array(p.size);
    }));
  }

  /**
   * The mirror's gradients, summed over the step's micro-batches, into the device
   * gradients. A copy, not an add: the optimizer's gather() zeroed them for this step
   * and nothing else accumulates into them.
   */
  async push(): Promise<void> {
    await Promise.all(this.host.map((p, i) => this.params[i]!.grad!.copyFrom(p.grad)));
  }

  /** Drops the mirror's gradients, and its parameters too when the device keeps only a shard of them (ZeRO-3). */
  release(params: boolean): void {
    for (const p of this.host) {
      p.grad = RELEASED;
      if (params) p.data = RELEASED;
    }
  }
}
