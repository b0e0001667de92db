/**
 * The GPU storage of the runtime (storage.ts): float32 and 16-bit DeviceBuffers,
 * collectives on an NCCL communicator, and the CUDA kernels for casts,
 * accumulation, scaling, sums of squares and the optimizer step (native/kernels:
 * no shard is copied to the host). The arithmetic is the host storage's, bit for
 * bit (native/kernels/optim_defs.h).
 */
import type { DType } from '../dtypes.js';
import { DeviceBuffer } from '../gpu/device-buffer.js';
import { allReducePreMulSum, reduceScatterPreMulSum } from '../comm/nccl/group.js';
import { add, cast, scale, sumSquares } from '../gpu/cuda-kernels.js';
import { DeviceOptimizer } from './optim-device.js';
import type { Storage } from './storage.js';

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

/** DeviceBuffers carry their dtype, so the dtypes the interface passes are not needed here. */
export const deviceStorage: Storage<DeviceBuffer, DeviceBuffer, null> = {
  unbound: null,
  zeros: (length) => zeros('float32', length),
  zerosOf: zeros,
  view: slice,
  copy: (dst, src) => dst.copyFromDevice(src.length === dst.length ? src : slice(src, 0, dst.length)),
  zero: (buf) => buf.fillBytes(0),
  compress: async (src, dtype, premul) => {
    const buf = await zeros(dtype, src.length);
    await cast(src, buf);
    return { buf, premul };
  },
  cast: (src, dst) => cast(src, dst),
  addInto: (dst, src) => add(dst, src),
  scaleBy: async (bufs, c) => {
    await Promise.all(bufs.map((b) => scale(b, c)));
  },
  sumSquares: async (bufs) => {
    let total = 0;
    for (const s of await Promise.all(bufs.map((b) => sumSquares(b)))) total += s;
    return total;
  },
  free: (buf) => buf?.dispose(),
  toHost: async (buf) => (await buf.toHost()) as Float32Array,
  allReduce: (comm, buf, o) => (o.premul != null ? allReducePreMulSum(comm, buf, o.premul) : comm.allReduce(buf, { op: o.op })),
  reduceScatter: (comm, send, recv, o) =>
    o.premul != null ? reduceScatterPreMulSum(comm, send, recv, o.premul) : comm.reduceScatter(send, recv, { op: o.op }),
  allGather: (comm, send, recv) => comm.allGather(send, recv),
  broadcast: (comm, buf) => comm.broadcast(buf, { root: 0 }),
  allReduceScalar: async (comm, x) => {
    const local = await zeros('float64', 1);
    try {
      await local.copyFrom(new Float64Array([x]));
      if (comm.size > 1) await comm.allReduce(local, { op: 'sum' });
      return ((await local.toHost()) as Float64Array)[0]!;
    } finally {
      local.dispose();
    }
  },
  optimizer: (opt, slots) => DeviceOptimizer.create(opt, slots, (length) => zeros('float32', length)),
};
