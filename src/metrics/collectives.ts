/**
 * Bytes and busy time of every collective this process issues, per kind, for all its
 * communicators together (the world and any split from it). The communicator calls
 * collectiveStarted() when it submits an operation and collectiveEnded() when the operation
 * settles; the cost is a Map update, so it is always on.
 *
 * Bytes are nccl-tests' message size: the buffer every rank holds in full (allGather:
 * the output, reduceScatter: the input, otherwise the count × element size). Time is
 * the operation's own run: a communicator runs its operations one after another, so
 * an operation runs from the later of its submission and the previous one's end to
 * its own end, as seen from the JS thread (a late callback makes it longer, so the
 * bandwidth derived from it is a lower bound).
 */
import { performance } from 'node:perf_hooks';
import { DTYPE_BYTES, type DType } from '../dtypes.js';

export interface CollectiveTotals {
  calls: number;
  bytes: number;
  seconds: number;
}

/**
 * One communicator's part in the totals: when its last operation ended. Held by the
 * communicator (a property read, where a WeakMap keyed by the communicator cost a hash
 * lookup and an insertion per call).
 */
export interface CollectiveClock {
  lastEnd: number;
}

const totals = new Map<string, CollectiveTotals>();
// The kind of the last update and its totals: a training loop's calls are mostly one kind
// in a row (the small all-reduce of every step), and the Map's hash lookup was about 2 %
// of an awaited 8-byte all-reduce within a host.
let lastKind = '';
let lastTotals: CollectiveTotals | undefined;

/** nccl-tests' size in bytes of one operation. */
export function collectiveBytes(kind: string, count: number, dtype: DType, worldSize: number): number {
  const elems = kind === 'allGather' || kind === 'reduceScatter' ? count * worldSize : kind === 'barrier' || kind === 'split' ? 0 : count;
  return elems * DTYPE_BYTES[dtype];
}

/** The submission time of an operation: hand it to collectiveEnded() once the operation settles. */
export function collectiveStarted(): number {
  return performance.now();
}

/**
 * One operation of a communicator (its `clock`) settled: `submitted` from
 * collectiveStarted(), `bytes` from collectiveBytes(), `end` a performance.now() reading
 * of when; a failure counts no bytes and no time.
 */
export function collectiveEnded(clock: CollectiveClock, kind: string, bytes: number, submitted: number, ok: boolean,
  end = performance.now()): void {
  if (!ok) {
    clock.lastEnd = end;
    return;
  }
  const start = Math.max(submitted, clock.lastEnd);
  clock.lastEnd = end;
  let t = kind === lastKind ? lastTotals : totals.get(kind);
  if (!t) totals.set(kind, (t = { calls: 0, bytes: 0, seconds: 0 }));
  lastKind = kind;
  lastTotals = t;
  t.calls += 1;
  t.bytes += bytes;
  t.seconds += (end - start) / 1000;
}

/** A copy of the totals so far, by kind (allReduce, allGather, ...). */
export function collectiveTotals(): Record<string, CollectiveTotals> {
  return Object.fromEntries([...totals].map(([k, v]) => [k, { ...v }]));
}
