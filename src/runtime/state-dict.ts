/**
 * Checkpointable state of DDP and FSDP, as flat pieces of named global tensors
 * (the form src/checkpoint saves and loads; the runtime does not import it).
 * Tensors are named per parameter (`blocks.0.w1`, `blocks.0.w1.exp_avg`), never
 * per FSDP unit, so a checkpoint written by FSDP at one world size loads into
 * DDP or FSDP at any other: a unit's padded shard is cut at parameter borders
 * and the padding is never saved. The same mapping serves the GPU path, whose
 * pieces may be DeviceBuffer views (parameters) beside host arrays (optimizer
 * state, which its host-fallback optimizer keeps on the host).
 */
import type { DeviceBuffer } from '../gpu/device-buffer.js';
import type { Optimizer } from './optim.js';
import type { FlatPiece } from './types.js';

/** What a piece's data may be: a host array or (GPU path) a float32 DeviceBuffer. */
export type PieceArray = Float32Array | DeviceBuffer;

/** A parameter as the state dict sees it: ParamLike and DeviceParam both fit (shape read when present). */
export interface NamedParam {
  readonly name: string;
  readonly size: number;
  readonly shape?: readonly number[];
}

/** The row-major shape a parameter is saved with (flat when the model gives none). */
export function shapeOf(p: { readonly size: number; readonly shape?: readonly number[] }): readonly number[] {
  return p.shape ?? [p.size];
}

/**
 * The optimizer's live state for one slot, by state name (`exp_avg`, ...).
 * Allocates state the optimizer has not created yet (zeros, as a first step would).
 */
export function slotState(optimizer: Optimizer, key: string, size: number): Record<string, Float32Array> {
  const out: Record<string, Float32Array> = {};
  for (const [name, a] of Object.entries(optimizer.state([{ key, size }]).tensors)) out[name.slice(key.length + 1)] = a;
  return out;
}

/**
 * Elements [start, end) of a host array or a DeviceBuffer, sharing its memory.
 * A DeviceBuffer cannot be empty, so callers never ask for an empty range of one.
 */
export function sub<D extends PieceArray>(arr: D, start: number, end: number): D {
  if (ArrayBuffer.isView(arr)) return arr.subarray(start, end) as D;
  const buf = arr as DeviceBuffer;
  return buf.view(start * (buf.byteLength / buf.length), end - start) as D;
}

/**
 * Pieces of the parameters laid out back to back at `offsets` that the flat
 * range [lo, hi) holds. `arrays` (by state name; '' is the parameter itself)
 * hold that range from their index 0. Views, not copies: a save snapshots them,
 * a load fills them in place.
 */
export function rangePieces<D extends PieceArray = Float32Array>(params: readonly NamedParam[], offsets: readonly number[], lo: number, hi: number, arrays: Record<string, D>): Record<string, FlatPiece<D>> {
  const out: Record<string, FlatPiece<D>> = {};
  params.forEach((p, i) => {
    const o = offsets[i]!;
    const a = Math.max(lo, o);
    const b = Math.min(hi, o + p.size);
    if (a >= b) return; // this rank holds none of p (its shard is all padding or other parameters)
    for (const [what, arr] of Object.entries(arrays)) {
      out[what ? `${p.name}.${what}` : p.name] = { data: sub(arr, a - lo, b - lo), globalShape: shapeOf(p), offset: a - o, length: b - a };
    }
  });
  return out;
}
