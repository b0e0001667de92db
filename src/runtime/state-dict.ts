/**
 * Checkpointable state of DDP and FSDP, as flat pieces of named global tensors
 * (the form src/checkpoint saves and loads; the runtime does not import it).
 * Tensors are named per parameter (`blocks.0.w1`, `blocks.0.w1.exp_avg`), never
 * per FSDP unit, so a checkpoint written by FSDP at one world size loads into
 * DDP or FSDP at any other: a unit's padded shard is cut at parameter borders
 * and the padding is never saved. The same mapping serves the GPU path, whose
 * pieces are DeviceBuffer views (parameters and the device optimizer's state).
 */
import type { DeviceBuffer } from '../gpu/device-buffer.js';
/** What the state dict reads of an optimizer: its live state per slot (host arrays or DeviceBuffers). */
export interface OptimizerStateSource<A extends PieceArray = PieceArray> {
  state(slots: readonly { key: string; size: number }[]): { step: number; tensors: Record<string, A> };
}
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
export function slotState<A extends PieceArray>(optimizer: OptimizerStateSource<A>, key: string, size: number): Record<string, A> {
  const out: Record<string, A> = {};
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

/**
 * DDP: parameters and optimizer state are replicated, so each rank saves only its
 * 1/world flat slice of every tensor: all ranks write in parallel, nothing twice.
 * `dataOf` gives a parameter's storage (host array or DeviceBuffer).
 */
export function replicatedSlices<P extends NamedParam, D extends PieceArray, A extends PieceArray>(params: readonly P[],
  dataOf: (p: P) => D, optimizer: OptimizerStateSource<A>, rank: number, size: number): Record<string, FlatPiece<D | A>> {
  const out: Record<string, FlatPiece<D | A>> = {};
  for (const p of params) {
    const per = Math.ceil(p.size / size);
    const lo = rank * per;
    if (lo >= p.size) continue; // the last ranks may hold none of a small tensor (and a device view cannot be empty)
    const arrays: Record<string, D | A> = { '': dataOf(p), ...slotState(optimizer, p.name, p.size) };
    for (const k of Object.keys(arrays)) arrays[k] = sub(arrays[k]!, lo, p.size);
    Object.assign(out, rangePieces([p], [0], lo, lo + per, arrays));
  }
  return out;
}

/** DDP load targets: every tensor whole, so replicas agree again without a broadcast. */
export function wholeTensors<P extends NamedParam, D extends PieceArray, A extends PieceArray>(params: readonly P[],
  dataOf: (p: P) => D, optimizer: OptimizerStateSource<A>): Record<string, FlatPiece<D | A>> {
  const out: Record<string, FlatPiece<D | A>> = {};
  for (const p of params) {
    Object.assign(out, rangePieces<D | A>([p], [0], 0, p.size, { '': dataOf(p), ...slotState(optimizer, p.name, p.size) }));
  }
  return out;
}

/** A ZeRO/FSDP unit as the state dict sees it: parameters back to back, this rank's master shard. */
export interface ShardedUnit<D extends PieceArray> {
  readonly params: readonly NamedParam[];
  readonly offsets: readonly number[];
  readonly shard: number;
  readonly master: D;
}

/** FSDP: each rank's master shard and optimizer shard, cut at parameter borders (padding dropped). */
export function shardedPieces<D extends PieceArray, A extends PieceArray>(units: readonly ShardedUnit<D>[],
  optimizer: OptimizerStateSource<A>, rank: number): Record<string, FlatPiece<D | A>> {
  const out: Record<string, FlatPiece<D | A>> = {};
  units.forEach((u, i) => {
    const lo = rank * u.shard;
    Object.assign(out, rangePieces<D | A>(u.params, u.offsets, lo, lo + u.shard, { '': u.master, ...slotState(optimizer, `unit${i}`, u.shard) }));
  });
  return out;
}
