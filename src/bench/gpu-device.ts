/**
 * BenchDevice for the NCCL backend: the three slabs are device allocations and every
 * Buffer the collectives see is a DeviceBuffer view into one (no copies). Inputs and
 * expected results come from the same verifiable.ts generators as the host path
 * (staged on the host, copied in once per size), because the kernels' fill pattern
 * is sum-only with no element offset and cannot express prod/min/max/avg or the
 * per-block offsets of gather-like tests. Verification runs the checksum kernel on
 * the device first and only copies both buffers back when the sums differ (or the
 * kernels are unavailable), where the host count is exact, incl. avg's 2-ULP slack.
 *
 * Also the host-side Control and rank-line exchange for NCCL, which only moves
 * device memory: small DeviceBuffers carry the values.
 */
import type { Buffer, Communicator } from '../comm/communicator.js';
import { DTYPE_BYTES, arrayTypeOf, type DType, type HostArray } from '../dtypes.js';
import { DeviceBuffer } from '../gpu/device-buffer.js';
import * as kernels from '../gpu/kernels.js';
import type { BenchDevice, Slab } from './collective.js';
import type { Control } from './driver.js';
import { countWrong, prepareExpected, prepareInput, type GenOp } from './verifiable.js';

/** A zero-length slice: NCCL buffers cannot be empty, and nothing reads or writes it. */
const empty = (dtype: DType) => new (arrayTypeOf(dtype))(0) as HostArray;
const isDev = (b: Buffer): b is DeviceBuffer => b instanceof DeviceBuffer;
const lengthOf = (b: Buffer) => (isDev(b) ? b.length : (b as HostArray).length);

async function stage(buf: Buffer, dtype: DType, fill: (h: HostArray) => void): Promise<void> {
  if (!isDev(buf)) return;
  const h = new (arrayTypeOf(dtype))(buf.length) as HostArray;
  fill(h);
  await buf.copyFrom(h);
}

export function createGpuDevice(): BenchDevice {
  // undefined until the first checksum: false when the kernels are not built.
  let kernelsWork: boolean | undefined;
  async function sameOnDevice(a: DeviceBuffer, e: DeviceBuffer): Promise<boolean> {
    if (kernelsWork === false) return false;
    try {
      const [x, y] = await Promise.all([kernels.checksum(a), kernels.checksum(e)]);
      kernelsWork = true;
      return x === y;
    } catch (err) {
      if (kernelsWork === undefined && (err as { code?: string }).code === 'ERR_UNAVAILABLE') {
        kernelsWork = false;
        return false;
      }
      throw err;
    }
  }
  return {
    alloc: (bytes) => DeviceBuffer.alloc({ dtype: 'uint8', length: Math.max(1, bytes) }),
    slab(mem, byteOffset, dtype): Slab {
      const size = DTYPE_BYTES[dtype];
      return { at: (offset, count) => (count > 0 ? (mem as DeviceBuffer).view(byteOffset + offset * size, count, dtype) : empty(dtype)) };
    },
    slice(buf, offset, count) {
      if (!isDev(buf) || count === 0) return empty(isDev(buf) ? buf.dtype : 'uint8');
      return buf.view(offset * DTYPE_BYTES[buf.dtype], count);
    },
    zero: async (buf) => { if (isDev(buf)) await buf.fillBytes(0); },
    copy: async (dst, src) => { if (isDev(dst) && isDev(src)) await dst.copyFromDevice(src); },
    prepareInput: (buf, dtype, op, n, rank, seed, offset) => stage(buf, dtype, (h) => prepareInput(h, dtype, op, n, rank, seed, offset)),
    prepareExpected: (buf, dtype, op, n, seed, offset) => stage(buf, dtype, (h) => prepareExpected(h, dtype, op, n, seed, offset)),
    async countWrong(actual, expected, dtype, op: GenOp) {
      if (!isDev(actual) || !isDev(expected)) return 0;  // both empty
      if (lengthOf(actual) !== lengthOf(expected)) throw new Error(`countWrong: ${actual.length} elements against ${expected.length}`);
      if (await sameOnDevice(actual, expected)) return 0;
      const [a, e] = await Promise.all([actual.toHost(), expected.toHost()]);
      return countWrong(a, e, dtype, op);
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
    allReduce: (values, op) => through(values, (b) => comm.allReduce(b, { op })),
    fromRank0: (values) => through(values, (b) => comm.broadcast(b, { root: 0 })),
    barrier: async () => void (await comm.barrier()),
  };
}

/** allGather of `slot`-byte records through device memory; returns size * slot bytes. */
export async function allGatherBytes(comm: Communicator, mine: Uint8Array): Promise<Uint8Array> {
  const send = await DeviceBuffer.from(mine, { dtype: 'uint8' });
  const all = DeviceBuffer.alloc({ dtype: 'uint8', length: mine.length * comm.size });
  try {
    await comm.allGather(send, all);
    return (await all.toHost()) as Uint8Array;
  } finally {
    send.dispose();
    all.dispose();
  }
}
