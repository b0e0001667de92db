/**
 * What the GPU runtime (ddp-device.ts, fsdp-device.ts) needs beyond DeviceBuffer:
 * float32 views by element, zeroed allocations, casts, accumulation, scaling and
 * sums of squares through the CUDA kernels (native/kernels: no shard is copied to
 * the host), and a submission queue that keeps collectives in program order. The
 * arithmetic is the host path's, bit for bit (native/kernels/optim_defs.h).
 */
import type { DType } from '../dtypes.js';
import { DeviceBuffer } from '../gpu/device-buffer.js';
import { add, cast as castKernel, scale, sumSquares } from '../gpu/kernels.js';

/**
 * A parameter whose storage lives on the GPU. The runtime rebinds `data` and `grad`
 * to views of its buckets, gathered units or unsharded gradients, and to null while
 * a stage-3 unit is sharded (a DeviceBuffer cannot be empty): read them at use time.
 */
export interface DeviceParam {
  readonly name: string;
  readonly size: number;
  /** Row-major shape recorded in checkpoints; flat [size] when absent. */
  readonly shape?: readonly number[];
  data: DeviceBuffer | null;
  /** Accumulated by backward; zeroed by the runtime's zeroGrad(). */
  grad: DeviceBuffer | null;
}

/** `length` elements of `dtype`, zeroed (padding must read as zero in norms and updates). */
export async function zeros(dtype: DType, length: number): Promise<DeviceBuffer> {
  const b = DeviceBuffer.alloc({ dtype, length });
  await b.fillBytes(0);
  return b;
}

/** Elements [start, start + length) of `buf`, as a view of the same dtype. */
export function slice(buf: DeviceBuffer, start: number, length: number): DeviceBuffer {
  return buf.view(start * (buf.byteLength / buf.length), length);
}

/** dst = src converted by the cast kernel (float32 <-> bfloat16 / float16, round to nearest even). */
export function cast(src: DeviceBuffer, dst: DeviceBuffer): Promise<void> {
  return castKernel(src, dst);
}

/** dst += src (float32). */
export function addInto(dst: DeviceBuffer, src: DeviceBuffer): Promise<void> {
  return add(dst, src);
}

/** buf *= c (float32), the same rounding as the host path's clipping. */
export async function scaleBy(bufs: DeviceBuffer[], c: number): Promise<void> {
  await Promise.all(bufs.map((b) => scale(b, c)));
}

/** Σ x² in float64 over the buffers (the local part of a norm), in the host path's order. */
export async function deviceSumSquares(bufs: DeviceBuffer[]): Promise<number> {
  let total = 0;
  for (const s of await Promise.all(bufs.map((b) => sumSquares(b)))) total += s;
  return total;
}

/**
 * Collectives must be submitted in the same order on every rank. Casts before a
 * collective are awaited, so two launches (a prefetch and a reduce-scatter, two
 * buckets) could otherwise submit in whichever order their casts finish. Every
 * launch goes through one chain: `prepare` runs after the previous launch has
 * submitted, and returns the submitted work, which the chain does not wait for.
 */
export class SubmitQueue {
  #tail: Promise<unknown> = Promise.resolve();

  /** Runs `launch` after every earlier launch has submitted; resolves when its own work is done. */
  run(launch: () => Promise<{ done: PromiseLike<unknown> }>): Promise<void> {
    const submitted = this.#tail.then(launch);
    this.#tail = submitted.catch(() => undefined);
    return submitted.then(({ done }) => done).then(() => undefined);
  }

  /** Resolves once every launch so far has submitted (e.g. before a host-side read-modify-write). */
  drained(): Promise<void> {
    return this.#tail.then(() => undefined);
  }
}
