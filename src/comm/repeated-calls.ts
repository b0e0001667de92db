/**
 * The memory of allReduceSync's and allReduce's recent calls on host arrays: a small call
 * made again on the same memory with the same options (a loss, a norm or a stop flag
 * reduced every step) is prepared the second time (prepareAllReduce) and from then on
 * made as that prepared call's run() (allReduceSync) or start() (allReduce), which skip
 * the argument checks, the reading of the arrays and the building of the native call:
 * within a host 0.4-0.6 of the blocking call's time at 8-256 B (bench/shm/allreduce.ts,
 * shmSync against shmSyncFull), and of the awaited call's (shm against shmFull).
 *
 * A call is "the same" when its arrays cover the same bytes of the same ArrayBuffers
 * (views made anew each time, as `buf.subarray(0, 1)`, match), with the same array type
 * and the same op, dtype, out and timeoutMs. The memory must not be resizable or
 * growable (a prepared call holds it at its length) and at most MAX_BYTES per array:
 * above that the call's own cost is small beside the exchange, and a remembered call
 * holds its arrays' memory until it is evicted (SLOTS calls, least recently used
 * first) or the communicator is destroyed or aborted. NCCL_NODE_PREPARE_REPEATED=0 turns
 * this off (every call checked and built anew).
 */
import type { HostArray } from '../dtypes.js';
import type { AllReduceOptions } from './call-options.js';
import type { PreparedAllReduce } from './prepared.js';
import type { Work } from './work.js';

export const MAX_BYTES = 64 * 1024;
export const SLOTS = 8;

/** Where an array's bytes are; undefined for memory a prepared call cannot hold. */
interface Region {
  buffer: ArrayBufferLike;
  offset: number;
  bytes: number;
  type: unknown;  // the array's constructor: the element type the call infers
}

export interface Slot {
  buf: Region;
  /** The array object that matched last (buf's region), checked by identity first. */
  view: HostArray;
  out: Region | undefined;
  op: unknown;
  dtype: unknown;
  timeoutMs: unknown;
  /** Made the second time the call is seen; null when preparing it failed. */
  call: PreparedAllReduce<HostArray> | null | undefined;
  lastUsed: number;
}

function regionOf(a: HostArray): Region | undefined {
  const buffer = a.buffer as ArrayBuffer & { resizable?: boolean; growable?: boolean };
  if (buffer.resizable === true || buffer.growable === true) return undefined;
  const bytes = a.byteLength;
  if (bytes === 0 || bytes > MAX_BYTES) return undefined;
  return { buffer, offset: a.byteOffset, bytes, type: a.constructor };
}

function sameRegion(r: Region, a: HostArray): boolean {
  // byteLength first: a detached array's is 0, which no slot holds.
  return a.byteLength === r.bytes && a.buffer === r.buffer && a.byteOffset === r.offset && a.constructor === r.type;
}

// The options a slot may match: only allReduceSync's own keys (any other is refused by
// the schema, which only the full path runs), each equal to the slot's.
function sameOptions(s: Slot, o: AllReduceOptions<HostArray> | undefined, outArr: HostArray | undefined): boolean {
  if (o === undefined) return s.op === undefined && s.dtype === undefined && s.timeoutMs === undefined && s.out === undefined;
  for (const k in o) {
    if (k !== 'op' && k !== 'out' && k !== 'dtype' && k !== 'timeoutMs') return false;
  }
  if (o.op !== s.op || o.dtype !== s.dtype || o.timeoutMs !== s.timeoutMs) return false;
  return outArr === undefined ? s.out === undefined : s.out !== undefined && ArrayBuffer.isView(outArr) && sameRegion(s.out, outArr);
}

export class RepeatedCalls {
  readonly #slots: Slot[] = [];
  #clock = 0;
  #prepared = 0;
  #runs = 0;

  /** The slot of this call when it was seen before (its prepared call, if made, in `call`). */
  find(buf: HostArray, options: AllReduceOptions<HostArray> | undefined): Slot | undefined {
    if (this.#slots.length === 0 || !ArrayBuffer.isView(buf)) return undefined;
    const out = options?.out as HostArray | undefined;
    for (const s of this.#slots) {
      // The array object that matched last time still covers the same bytes of the same
      // buffer (neither can change for a view of a buffer that cannot resize), unless it
      // was transferred since, which leaves it none.
      const same = s.view === buf ? buf.byteLength === s.buf.bytes : sameRegion(s.buf, buf);
      if (same && sameOptions(s, options, out)) {
        s.view = buf;
        s.lastUsed = ++this.#clock;
        return s;
      }
    }
    return undefined;
  }

  /** Makes the prepared call of a slot that holds one; returns `result`. */
  run<B extends HostArray>(s: Slot, result: B): B {
    this.#runs++;
    s.call!.run();
    return result;
  }

  /** Starts the prepared call of a slot that holds one, not blocking; returns its Work. */
  start(s: Slot): Work {
    this.#runs++;
    return s.call!.start();
  }

  /**
   * Remembers a call that find() missed and the full path accepted, evicting (and
   * freeing) the least recently used slot when all are taken. Memory a prepared call
   * cannot hold is not remembered.
   */
  remember(buf: HostArray, options: AllReduceOptions<HostArray> | undefined): void {
    const region = regionOf(buf);
    if (!region) return;
    const outArr = options?.out as HostArray | undefined;
    const out = outArr === undefined ? undefined : regionOf(outArr);
    if (outArr !== undefined && !out) return;
    const fresh: Slot = {
      buf: region, view: buf, out, op: options?.op, dtype: options?.dtype, timeoutMs: options?.timeoutMs, call: undefined,
      lastUsed: ++this.#clock,
    };
    if (this.#slots.length < SLOTS) {
      this.#slots.push(fresh);
      return;
    }
    let lru = 0;
    for (let i = 1; i < this.#slots.length; i++) if (this.#slots[i]!.lastUsed < this.#slots[lru]!.lastUsed) lru = i;
    this.#slots[lru]!.call?.free();
    this.#slots[lru] = fresh;
  }

  /** Gives a slot found a second time its prepared call (null: it could not be prepared; never retried). */
  keep(s: Slot, call: PreparedAllReduce<HostArray> | null): void {
    s.call = call;
    if (call) this.#prepared++;
  }

  /** Lets every remembered call's memory go. */
  clear(): void {
    for (const s of this.#slots) s.call?.free();
    this.#slots.length = 0;
  }

  /** @internal For tests: calls prepared, runs and starts of prepared calls, slots in use. */
  get stats(): { prepared: number; runs: number; slots: number } {
    return { prepared: this.#prepared, runs: this.#runs, slots: this.#slots.length };
  }
}
