/**
 * One rank's in-memory snapshot as a single self-checking byte frame:
 *
 *   [tensor bytes, back to back | meta JSON | u32 meta length | u32 CRC32C of all before it]
 *
 * One allocation, one send to the replica holder, and a digest that covers the
 * step, the piece layout and the train state as well as the data, so a flipped
 * byte anywhere (the digest included) is caught before the frame is used.
 */
import { DTYPE_BYTES, type DType } from '../dtypes.js';
import { NcclNodeError } from '../errors.js';
import { DeviceBuffer } from '../gpu/device-buffer.js';
import { io } from './io.js';
import type { LoadTarget } from './load.js';
import { dtypeOf, snapshot, type CheckpointState, type RunMetadata, type TrainState } from './state.js';

export interface FramePiece {
  name: string;
  dtype: DType;
  globalShape: number[];
  offset: number;
  length: number;
  /** Byte offset of the piece's data in the frame. */
  at: number;
}

export interface FrameMeta {
  /** The rank whose state this is, and the world it was taken in. */
  owner: number;
  world: number;
  step: number;
  pieces: FramePiece[];
  train: TrainState;
  metadata: RunMetadata;
}

/** The frame's layout, known before any tensor byte is copied (so a budget can refuse it first). */
export interface FramePlan {
  meta: FrameMeta;
  metaBytes: Uint8Array;
  dataBytes: number;
  totalBytes: number;
}

const TRAILER = 8;

export function planFrame(state: CheckpointState, owner: number, world: number): FramePlan {
  const step = state.train.step;
  if (!Number.isInteger(step) || step < 0) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `in-memory checkpoint: train.step must be a non-negative integer, received ${step}`);
  const pieces: FramePiece[] = [];
  let at = 0;
  for (const [name, t] of Object.entries(state.tensors)) {
    const dtype = t.data instanceof DeviceBuffer ? (t.dtype ?? t.data.dtype) : dtypeOf(t.data, t.dtype, name);
    const length = t.length ?? t.data.length;
    pieces.push({ name, dtype, globalShape: [...t.globalShape], offset: t.offset, length, at });
    at += length * DTYPE_BYTES[dtype];
  }
  const meta: FrameMeta = {
    owner, world, step, pieces,
    train: structuredClone(state.train),
    metadata: structuredClone(state.metadata ?? {}),
  };
  const metaBytes = new TextEncoder().encode(JSON.stringify(meta));
  return { meta, metaBytes, dataBytes: at, totalBytes: at + metaBytes.length + TRAILER };
}

/** Copies the state into a new frame (state.ts's snapshot: native parallel copies, device copies) and seals it. */
export async function fillFrame(plan: FramePlan, state: CheckpointState): Promise<Uint8Array> {
  const frame = new Uint8Array(plan.totalBytes);
  const at = new Map(plan.meta.pieces.map((p) => [p.name, p.at]));
  await snapshot(state, { alloc: (name, n) => frame.subarray(at.get(name)!, at.get(name)! + n) });
  frame.set(plan.metaBytes, plan.dataBytes);
  const view = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
  view.setUint32(plan.totalBytes - TRAILER, plan.metaBytes.length, true);
  view.setUint32(plan.totalBytes - 4, io().crc32c(frame.subarray(0, plan.totalBytes - 4)), true);
  return frame;
}

/** The frame's stored digest and whether its bytes still match it. */
export function checkFrame(frame: Uint8Array): { ok: boolean; stored: number; actual: number } {
  if (frame.byteLength < TRAILER) return { ok: false, stored: 0, actual: 0 };
  const stored = new DataView(frame.buffer, frame.byteOffset, frame.byteLength).getUint32(frame.byteLength - 4, true);
  const actual = io().crc32c(frame.subarray(0, frame.byteLength - 4));
  return { ok: stored === actual, stored, actual };
}

/** The frame's meta, after its digest checked out (ERR_CHECKSUM otherwise). */
export function readFrame(frame: Uint8Array, what: string): FrameMeta {
  const c = checkFrame(frame);
  if (!c.ok) {
    throw new NcclNodeError('ERR_CHECKSUM', `${what}: CRC32C ${hex(c.actual)} does not match the stored ${hex(c.stored)} (the snapshot was damaged in memory or in transit)`, { ...c });
  }
  const n = new DataView(frame.buffer, frame.byteOffset, frame.byteLength).getUint32(frame.byteLength - TRAILER, true);
  const start = frame.byteLength - TRAILER - n;
  return JSON.parse(new TextDecoder().decode(frame.subarray(start, start + n))) as FrameMeta;
}

function hex(n: number): string {
  return n.toString(16).padStart(8, '0');
}

/** Whether `frames` hold every element `targets` ask for (checked before a collective decides to gather). */
export function covers(targets: Record<string, LoadTarget>, frames: { meta: FrameMeta }[]): boolean {
  try {
    for (const [name, t] of Object.entries(targets)) coverage(name, t, frames, null);
    return true;
  } catch {
    return false;
  }
}

/**
 * Writes every target from the pieces of `frames` that intersect it (as load() does
 * from files): elements past the tensor's end are zeroed (padding); an element no
 * piece holds, or a dtype that differs, fails naming the tensor.
 */
export async function fillTargets(targets: Record<string, LoadTarget>, frames: { meta: FrameMeta; frame: Uint8Array }[]): Promise<void> {
  const device: Promise<void>[] = [];
  for (const [name, t] of Object.entries(targets)) {
    const dtype = t.data instanceof DeviceBuffer ? (t.dtype ?? t.data.dtype) : dtypeOf(t.data, t.dtype, name);
    const length = t.length ?? t.data.length;
    const bytes = DTYPE_BYTES[dtype];
    const dst = t.data instanceof DeviceBuffer ? new Uint8Array(length * bytes) : new Uint8Array(t.data.buffer, t.data.byteOffset, length * bytes);
    coverage(name, t, frames, dst);
    if (t.data instanceof DeviceBuffer && length > 0) device.push(t.data.view(0, length * bytes, 'uint8').copyFrom(dst));
  }
  await Promise.all(device);
}

/** Checks (and with `dst`, copies) target `name`'s elements from the frames' pieces. */
function coverage(name: string, t: LoadTarget, frames: { meta: FrameMeta; frame?: Uint8Array }[], dst: Uint8Array | null): void {
  const dtype = t.data instanceof DeviceBuffer ? (t.dtype ?? t.data.dtype) : dtypeOf(t.data, t.dtype, name);
  const bytes = DTYPE_BYTES[dtype];
  const length = t.length ?? t.data.length;
  let numel = -1;
  let covered = 0;
  for (const f of frames) {
    for (const p of f.meta.pieces) {
      if (p.name !== name) continue;
      if (p.dtype !== dtype) throw new NcclNodeError('ERR_SIZE_MISMATCH', `in-memory checkpoint tensor ${name}: snapshot holds ${p.dtype}, the target is ${dtype}`);
      numel = p.globalShape.reduce((a, b) => a * b, 1);
      const lo = Math.max(p.offset, t.offset);
      const hi = Math.min(p.offset + p.length, t.offset + length);
      if (hi <= lo) continue;
      covered += hi - lo;
      if (dst && f.frame) dst.set(f.frame.subarray(p.at + (lo - p.offset) * bytes, p.at + (hi - p.offset) * bytes), (lo - t.offset) * bytes);
    }
  }
  if (numel < 0) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `in-memory checkpoint: no snapshot holds tensor ${name}`);
  // Padding: the target's elements past the tensor's end.
  const real = Math.max(0, Math.min(length, numel - t.offset));
  if (dst && real < length) dst.fill(0, real * bytes, length * bytes);
  if (covered !== real) {
    throw new NcclNodeError('ERR_SIZE_MISMATCH', `in-memory checkpoint tensor ${name}: the snapshots hold ${covered} of the ${real} elements [${t.offset}, ${t.offset + real}) wanted`);
  }
}
