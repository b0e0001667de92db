/**
 * What a checkpoint holds, and the snapshot that lets the training step go on:
 * named flat shards (any rank's piece of any tensor, described by the global
 * shape and the flat element offset of its first element), plus JSON train
 * state and run metadata. The runtime's ZeRO layout (units padded to a multiple
 * of the world size) maps onto this with flatShard(), which drops the padding so
 * the saved tensor has its true size and reshards to any world size.
 */
import { DTYPE_BYTES, type DType, type HostArray } from '../dtypes.js';
import { NcclNodeError } from '../errors.js';
import type { DeviceBuffer, PinnedHostBuffer } from '../gpu/device-buffer.js';
import type { Stream } from '../gpu/stream.js';
import { io, settle } from './io.js';

export interface TensorShard {
  /**
   * This rank's elements. A DeviceBuffer is snapshotted on a side stream: device -> device
   * staging when the save goes through GPUDirect Storage, else device -> pinned host.
   */
  data: HostArray | DeviceBuffer;
  /** Needed for Uint16Array (float16 or bfloat16); otherwise inferred. */
  dtype?: DType;
  globalShape: readonly number[];
  /** Flat (row-major) element offset of data[0] in the global tensor. */
  offset: number;
  /** Elements of data to save (default all): a padded shard saves only its real part. */
  length?: number;
}

export interface TrainState {
  step: number;
  /** RNG state, data-loader cursor, LR-scheduler state... any JSON. */
  [key: string]: unknown;
}

export interface RunMetadata {
  config?: unknown;
  codeVersion?: string;
  dataVersion?: string;
  [key: string]: unknown;
}

export interface CheckpointState {
  tensors: Record<string, TensorShard>;
  train: TrainState;
  metadata?: RunMetadata;
}

/** One tensor piece, copied away from the training state. */
export interface Staged {
  name: string;
  dtype: DType;
  globalShape: number[];
  offset: number;
  length: number;
  /** A host copy, or (GDS) a device copy that cuFile writes straight to the file. */
  bytes: Uint8Array | DeviceBuffer;
  byteLength: number;
  /** The piece came from a DeviceBuffer (staged on the host or on the device). */
  fromDevice: boolean;
}

/**
 * The ZeRO flat layout: a unit of `numel` elements padded to a multiple of
 * `world`, rank r owning [r*shard, (r+1)*shard). Returns the shard entry with
 * the padding cut off (the last ranks may own fewer real elements, or none).
 */
export function flatShard(data: Float32Array | HostArray, numel: number, rank: number, world: number, dtype?: DType): TensorShard {
  const shard = Math.ceil(numel / world);
  const offset = Math.min(rank * shard, numel);
  const length = Math.max(0, Math.min(shard, numel - offset));
  if (data.length < length) throw new NcclNodeError('ERR_SIZE_MISMATCH', `flatShard: rank ${rank} of ${world} owns ${length} elements, the array holds ${data.length}`);
  return { data, dtype, globalShape: [numel], offset, length };
}

export function dtypeOf(data: HostArray, declared: DType | undefined, name: string): DType {
  const inferred: DType | undefined =
    data instanceof Float32Array ? 'float32' : data instanceof Float64Array ? 'float64' : data instanceof Int32Array ? 'int32'
    : data instanceof Uint32Array ? 'uint32' : data instanceof Int8Array ? 'int8' : data instanceof Uint8Array ? 'uint8'
    : data instanceof BigInt64Array ? 'int64' : data instanceof BigUint64Array ? 'uint64' : undefined;
  const dtype = declared ?? inferred;
  if (!dtype) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `checkpoint tensor ${name}: a ${data.constructor.name} needs dtype (float16 or bfloat16)`);
  if (DTYPE_BYTES[dtype] !== data.BYTES_PER_ELEMENT) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `checkpoint tensor ${name}: dtype ${dtype} does not fit a ${data.constructor.name}`);
  }
  return dtype;
}

function isDevice(data: TensorShard['data']): data is DeviceBuffer {
  return !ArrayBuffer.isView(data);
}

export interface SnapshotOptions {
  /** Side stream for device-to-host copies (the training stream is not blocked). */
  stream?: Stream;
  /** Returns a reusable host buffer of at least n bytes (pinned for device tensors). */
  alloc?: (name: string, n: number, device: boolean) => Uint8Array;
  /** Pinned host buffer factory (from src/gpu); snapshots DeviceBuffers when `alloc` is not given. */
  pinned?: (n: number) => PinnedHostBuffer;
  /**
   * GDS staging: a uint8 DeviceBuffer of exactly n bytes on `like`'s device. When given,
   * DeviceBuffers are copied device-to-device (the stall) and cuFile writes the copy.
   */
  deviceAlloc?: (name: string, n: number, like: DeviceBuffer) => DeviceBuffer;
  /** Takes back what alloc/deviceAlloc gave when the snapshot fails (bad input, a failed copy). */
  release?: (staged: Staged[]) => void;
}

/**
 * Copies every tensor piece into host memory the caller no longer touches. Large
 * host arrays are copied by native threads spread over the cores (one core's memcpy
 * reaches only part of the memory bandwidth), small ones here; DeviceBuffers are
 * copied on the side stream. All are awaited together: resolves once the state may
 * change again.
 */
export async function snapshot(state: CheckpointState, o: SnapshotOptions = {}): Promise<Staged[]> {
  const out: Staged[] = [];
  try {
    return await copyAll(state, o, out);
  } catch (err) {
    // Every copy has ended (copyAll waits for all of them): no writer is left on these buffers.
    o.release?.(out);
    throw err;
  }
}

async function copyAll(state: CheckpointState, o: SnapshotOptions, out: Staged[]): Promise<Staged[]> {
  const device: Promise<unknown>[] = [];
  const hostDst: Uint8Array[] = [];
  const hostSrc: Uint8Array[] = [];
  for (const [name, t] of Object.entries(state.tensors)) {
    const numel = t.globalShape.reduce((a, b) => a * b, 1);
    const length = t.length ?? t.data.length;
    if (!Number.isInteger(t.offset) || t.offset < 0 || t.offset + length > numel) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `checkpoint tensor ${name}: piece [${t.offset}, ${t.offset + length}) is outside its ${numel} elements`);
    }
    if (isDevice(t.data)) {
      const buf = t.data;
      const dtype = t.dtype ?? buf.dtype;
      const n = length * DTYPE_BYTES[dtype];
      if (n > buf.byteLength) throw new NcclNodeError('ERR_SIZE_MISMATCH', `checkpoint tensor ${name}: ${length} ${dtype} elements do not fit its DeviceBuffer of ${buf.byteLength} bytes`);
      const piece = { name, dtype, globalShape: [...t.globalShape], offset: t.offset, length, byteLength: n, fromDevice: true };
      if (n === 0) {
        out.push({ ...piece, bytes: new Uint8Array(0) });
        continue;
      }
      // Only the real part of a padded shard is copied.
      const src = buf.view(0, n, 'uint8');
      if (o.deviceAlloc) {
        const dst = o.deviceAlloc(name, n, buf);
        device.push(dst.copyFromDevice(src, o.stream));
        out.push({ ...piece, bytes: dst });
      } else {
        const bytes = (o.alloc ? o.alloc(name, n, true) : pinnedBytes(o, n)).subarray(0, n);
        device.push(src.copyTo(bytes, o.stream));
        out.push({ ...piece, bytes });
      }
      continue;
    }
    const dtype = dtypeOf(t.data, t.dtype, name);
    const src = new Uint8Array(t.data.buffer, t.data.byteOffset, length * DTYPE_BYTES[dtype]);
    const bytes = o.alloc ? o.alloc(name, src.byteLength, false).subarray(0, src.byteLength) : new Uint8Array(src.byteLength);
    if (src.byteLength >= PARALLEL_COPY_BYTES) {
      hostDst.push(bytes);
      hostSrc.push(src);
    } else {
      bytes.set(src);
    }
    out.push({ name, dtype, globalShape: [...t.globalShape], offset: t.offset, length, bytes, byteLength: bytes.byteLength, fromDevice: false });
  }
  if (hostDst.length > 0) device.push(settle(() => io().ioCopy(hostDst, hostSrc)));
  const failed = (await Promise.allSettled(device)).find((r) => r.status === 'rejected');
  if (failed) throw failed.reason;
  return out;
}

/** Host pieces at least this large go to the native parallel copy. */
const PARALLEL_COPY_BYTES = 1 << 20;

function pinnedBytes(o: SnapshotOptions, n: number): Uint8Array {
  if (!o.pinned) throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'checkpoint: snapshotting a DeviceBuffer needs a pinned-host allocator');
  return new Uint8Array(o.pinned(n).buffer, 0, n);
}
