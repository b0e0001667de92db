/**
 * BenchDevice for the NCCL backend: the three slabs are device allocations and every
 * Buffer the collectives see is a DeviceBuffer view into one (no copies). As in
 * nccl-tests, data is made and checked on the device: the verifiable kernels
 * (gpu-kernels.ts) write each rank's input and the expected result for any
 * collective, op, dtype and element offset, and count wrong elements (2 ULP for
 * floating-point avg) without copying results back. Only when the kernels are not
 * built (no nvcc at install time) does it fall back to the host generators of
 * verifiable.ts, staging through host memory, and it says so once.
 *
 * Also the host-side Control for NCCL, which only moves device memory: reductions
 * go through small DeviceBuffers, rank 0's values through broadcastObject.
 */
import type { Buffer, Communicator } from '../comm/communicator.js';
import { DTYPE_BYTES, arrayTypeOf, type DType, type HostArray } from '../dtypes.js';
import { isNcclNodeError } from '../errors.js';
import { DeviceBuffer } from '../gpu/device-buffer.js';
import type { BenchDevice, Slab } from './collective.js';
import type { Control } from './driver.js';
import { compareOnDevice, prepareOnDevice } from './gpu-kernels.js';
import { countWrong, prepareExpected, prepareInput } from './verifiable.js';

/** A zero-length slice: NCCL buffers cannot be empty, and nothing reads or writes it. */
const empty = (dtype: DType) => new (arrayTypeOf(dtype))(0) as HostArray;
const isDev = (b: Buffer): b is DeviceBuffer => b instanceof DeviceBuffer;

async function stage(buf: DeviceBuffer, dtype: DType, fill: (h: HostArray) => void): Promise<void> {
  const h = new (arrayTypeOf(dtype))(buf.length) as HostArray;
  fill(h);
  await buf.copyFrom(h);
}

/** `onFallback` hears, once, why the host generators replace the kernels. */
export function createGpuDevice(onFallback: (why: string) => void = () => {}): BenchDevice {
  // Set on the first kernel call that finds the kernels missing (ERR_UNAVAILABLE).
  let hostFallback = false;
  async function onDevice<T>(kernel: () => Promise<T>, host: () => Promise<T>): Promise<T> {
    if (hostFallback) return host();
    try {
      return await kernel();
    } catch (err) {
      if (!isNcclNodeError(err, 'ERR_UNAVAILABLE')) throw err;
      hostFallback = true;
      onFallback(`the verifiable-data kernels are unavailable (${err.message}); preparing and checking data on the host`);
      return host();
    }
  }
  // The timed loop asks for the same few views of a slab at every iteration; nccl-tests
  // adds an offset to a pointer there, and a new view (a native object) costs a few µs,
  // which at small sizes is a large part of an op. So views are made once and reused:
  // a view is only an address, and an op holds its memory while it runs.
  const views = new WeakMap<DeviceBuffer, Map<string, DeviceBuffer>>();
  const viewOf = (mem: DeviceBuffer, byteOffset: number, count: number, dtype: DType): DeviceBuffer => {
    let m = views.get(mem);
    if (!m) views.set(mem, (m = new Map()));
    const key = `${byteOffset}/${count}/${dtype}`;
    let v = m.get(key);
    if (!v) {
      if (m.size >= 4096) m.clear(); // a long sweep: drop the sizes already done
      m.set(key, (v = mem.view(byteOffset, count, dtype)));
    }
    return v;
  };
  return {
    alloc: (bytes) => DeviceBuffer.alloc({ dtype: 'uint8', length: Math.max(1, bytes) }),
    slab(mem, byteOffset, dtype): Slab {
      const size = DTYPE_BYTES[dtype];
      return { at: (offset, count) => (count > 0 ? viewOf(mem as DeviceBuffer, byteOffset + offset * size, count, dtype) : empty(dtype)) };
    },
    slice(buf, offset, count) {
      if (!isDev(buf) || count === 0) return empty(isDev(buf) ? buf.dtype : 'uint8');
      return buf.view(offset * DTYPE_BYTES[buf.dtype], count);
    },
    zero: async (buf) => { if (isDev(buf)) await buf.fillBytes(0); },
    copy: async (dst, src) => { if (isDev(dst) && isDev(src)) await dst.copyFromDevice(src); },
    async prepareInput(buf, dtype, op, n, rank, seed, offset) {
      if (!isDev(buf)) return;  // empty
      await onDevice(() => prepareOnDevice(buf, dtype, op, n, rank, seed, offset),
        () => stage(buf, dtype, (h) => prepareInput(h, dtype, op, n, rank, seed, offset)));
    },
    async prepareExpected(buf, dtype, op, n, seed, offset) {
      if (!isDev(buf)) return;
      await onDevice(() => prepareOnDevice(buf, dtype, op, n, -1, seed, offset),
        () => stage(buf, dtype, (h) => prepareExpected(h, dtype, op, n, seed, offset)));
    },
    async countWrong(actual, expected, dtype, op) {
      if (!isDev(actual) || !isDev(expected)) return 0;  // both empty
      if (actual.length !== expected.length) throw new Error(`countWrong: ${actual.length} elements against ${expected.length}`);
      return onDevice(() => compareOnDevice(actual, expected, dtype, op), async () => {
        const [a, e] = await Promise.all([actual.toHost(), expected.toHost()]);
        return countWrong(a, e, dtype, op);
      });
    },
    async corrupt(buf) {
      if (!isDev(buf)) return;
      // The element's top byte, as the host device does: visible even under avg's tolerance.
      const first = buf.view(0, DTYPE_BYTES[buf.dtype], 'uint8');
      const bytes = (await first.toHost()) as Uint8Array;
      bytes[bytes.length - 1]! ^= 0x40;
      await first.copyFrom(bytes);
    },
  };
}

/** Control over NCCL: the values travel in float64 device buffers. */
export function gpuControl(comm: Communicator): Control {
  async function through(values: number[], run: (b: DeviceBuffer) => PromiseLike<unknown>): Promise<number[]> {
    const buf = await DeviceBuffer.from(Float64Array.from(values.length ? values : [0]));
    try {
      await run(buf);
      return [...((await buf.toHost()) as Float64Array)].slice(0, values.length);
    } finally {
      buf.dispose();
    }
  }
  return {
    size: comm.size,
    rank: comm.rank,
    allReduce: (values, op) => through(values, (b) => comm.allReduce(b, { op })),
    fromRank0: (values) => comm.broadcastObject(values, { root: 0 }),
    barrier: async () => void (await comm.barrier()),
  };
}
