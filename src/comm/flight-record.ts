/**
 * A flight record kept on the JS side: the last N operations of every communicator
 * (NCCL_NODE_FLIGHT_RECORDER_SIZE, default 2000, 0 disables), for every backend. Gloo
 * has no native recorder, and the NCCL one (native/nccl/flight_recorder.cpp) sees only
 * its own communicators; this one is written in the same JSON layout (docs/gpu.md) so
 * that `nccl-node trace analyze` reads both.
 *
 * Sequence numbers mirror the native engine's: every collective, barrier, split and
 * refused call (the stand-in of Communicator's #guard) takes the next one, point-to-point
 * operations take none (seq -1). A communicator runs its operations one at a time in
 * issue order, so an operation starts when it was submitted or when the one before it
 * ended, whichever is later: that is its `startedUs`, and at dump time the first
 * unfinished operation of a communicator is `started`, the ones behind it `scheduled`.
 * Times are wall-clock microseconds as the JS thread sees them.
 *
 * An ERR_TIMEOUT dumps the records of this process (dumpTraces) and tells the listeners
 * (trace-signal.ts asks the other ranks to dump theirs).
 */
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { NcclNodeError } from '../errors.js';

export type OpState = 'scheduled' | 'started' | 'completed' | 'failed' | 'timeout' | 'aborted';

export interface TraceEntry {
  id: number;
  /** Collective sequence number on the communicator; -1 for send/recv. */
  seq: number;
  op: string;
  count: number;
  dtype: string;
  /** Root or peer; -1 when the call has none. */
  peer: number;
  state: OpState;
  enqueuedUs: number;
  startedUs: number;
  endedUs: number;
}

export interface CommTrace {
  comm: string;
  rank: number;
  size: number;
  lastEnqueuedSeq: number;
  lastStartedSeq: number;
  lastCompletedSeq: number;
  entries: TraceEntry[];
}

export interface TraceFile {
  version: 1;
  pid: number;
  reason: string;
  dumpedUs: number;
  /** Which recorder wrote it: 'js' here, absent in the native recorder's files. */
  source?: string;
  communicators: CommTrace[];
}

// Read once: it never changes within a process, and the getter is a call into Node.
const TIME_ORIGIN_MS = performance.timeOrigin;

/** Wall-clock microseconds of a performance.now() reading. */
export const wallUs = (perfMs: number): number => Math.round((TIME_ORIGIN_MS + perfMs) * 1000);

/** Wall-clock microseconds. */
export const nowUs = (): number => wallUs(performance.now());

function capacity(): number {
  const raw = process.env.NCCL_NODE_FLIGHT_RECORDER_SIZE;
  const n = raw === undefined || raw === '' ? 2000 : Number(raw);
  return Number.isInteger(n) && n >= 0 ? n : 2000;
}

const STATES: readonly OpState[] = ['scheduled', 'started', 'completed', 'failed', 'timeout', 'aborted'];
const SCHEDULED = 0;
const COMPLETED = 2;
const FAILED = 3;
const TIMEOUT = 4;
const ABORTED = 5;

// The numbers of one slot of the ring (entry id % capacity), side by side in one Float64Array.
const SEQ = 0;
const COUNT = 1;
const PEER = 2;
const STATE = 3;
const ENQUEUED = 4;  // performance.now() readings, ms; brought to wall-clock us when read
const STARTED = 5;
const ENDED = 6;  // 0 while running
const FIELDS = 7;

/**
 * One communicator's ring of operations, written on every call (the small all-reduce a
 * training step makes included). The ring is columns (numbers in one Float64Array, the
 * call and dtype names in arrays of the strings callers pass) rather than an object per
 * operation, so that recording allocates nothing: an object per call, held by the ring
 * past young-generation collections, was garbage the collector had to copy and promote
 * at every call rate. Entries are read as TraceEntry objects, made when read (since(),
 * json()).
 */
export class FlightRecord {
  readonly #capacity: number;
  readonly #nums: Float64Array;
  readonly #ops: string[];
  readonly #dtypes: string[];
  #next = 0;
  /** The slot of entry #next - 1 (id % capacity, kept rather than divided for on every call). */
  #lastSlot = -1;
  #seq = 0;
  #lastEnd = 0;  // ms
  lastEnqueuedSeq = -1;
  lastCompletedSeq = -1;

  constructor(public name: string, readonly rank: number, readonly size: number) {
    this.#capacity = capacity();
    this.#nums = new Float64Array(this.#capacity * FIELDS);
    this.#ops = new Array<string>(this.#capacity).fill('');
    this.#dtypes = new Array<string>(this.#capacity).fill('');
  }

  /** Records a submitted operation; `done` settles when it finishes. Returns its sequence number. */
  op(op: string, count: number, dtype: string, peer: number, done: Promise<unknown>): number {
    const id = this.begin(op, count, dtype, peer);
    done.then(() => this.completed(id), (err: unknown) => this.failed(id, err));
    return op === 'send' || op === 'recv' ? -1 : this.lastEnqueuedSeq;
  }

  /**
   * Records a submitted operation whose end the caller reports (completed() or failed()
   * with the id returned). `atMs`: when, as performance.now() read it (a caller that
   * reads the clock anyway hands its reading over: a clock read costs about as much as
   * the rest of this).
   */
  begin(op: string, count: number, dtype: string, peer: number, atMs = performance.now()): number {
    return this.#add(op, count, dtype, peer, op === 'send' || op === 'recv', atMs);
  }

  completed(id: number, atMs = performance.now()): void {
    this.#end(id, COMPLETED, atMs);
  }

  failed(id: number, err: unknown, atMs = performance.now()): void {
    const code = (err as { code?: string } | null)?.code;
    this.#end(id, code === 'ERR_TIMEOUT' ? TIMEOUT : code === 'ERR_COMM_ABORTED' ? ABORTED : FAILED, atMs);
    if (code === 'ERR_TIMEOUT') {
      const e = this.#holds(id) ? this.#entry(id) : undefined;
      const what = e ? `${e.op} #${e.seq}` : `operation ${id} (no longer in the record)`;
      timedOut(`${what} on rank ${this.rank} of ${this.size} timed out`);
    }
  }

  /** A call this rank refused: it still took its sequence number (and failed at once). */
  refused(op: string): void {
    if (op === 'send' || op === 'recv') return;
    const now = performance.now();
    this.#end(this.#add(op, 0, '', -1, false, now), FAILED, now);
  }

  #holds(id: number): boolean {
    return id < this.#next && id >= this.#next - this.#capacity;
  }

  #add(op: string, count: number, dtype: string, peer: number, p2p: boolean, atMs: number): number {
    const id = this.#next++;
    const seq = p2p ? -1 : this.#seq++;
    if (!p2p) this.lastEnqueuedSeq = seq;
    if (this.#capacity > 0) {
      const slot = this.#lastSlot + 1 === this.#capacity ? 0 : this.#lastSlot + 1;
      this.#lastSlot = slot;
      const n = this.#nums;
      const at = slot * FIELDS;
      n[at + SEQ] = seq;
      n[at + COUNT] = count;
      n[at + PEER] = peer;
      n[at + STATE] = SCHEDULED;
      n[at + ENQUEUED] = atMs;
      n[at + STARTED] = 0;
      n[at + ENDED] = 0;
      this.#ops[slot] = op;
      this.#dtypes[slot] = dtype;
    }
    return id;
  }

  #end(id: number, state: number, atMs: number): void {
    // An operation that outlived its place in the ring still moves the clock on.
    if (this.#holds(id)) {
      const n = this.#nums;
      // The entry just added (a call that completed before returning): its slot is known.
      const at = (id === this.#next - 1 ? this.#lastSlot : id % this.#capacity) * FIELDS;
      n[at + ENDED] = atMs;
      n[at + STARTED] = Math.max(n[at + ENQUEUED]!, Math.min(this.#lastEnd, atMs));
      n[at + STATE] = state;
      const seq = n[at + SEQ]!;
      if (state === COMPLETED && seq >= 0 && seq > this.lastCompletedSeq) this.lastCompletedSeq = seq;
    }
    this.#lastEnd = atMs;
  }

  #entry(id: number): TraceEntry {
    const slot = id % this.#capacity;
    const n = this.#nums;
    const at = slot * FIELDS;
    const ended = n[at + ENDED]!;
    return {
      id, seq: n[at + SEQ]!, op: this.#ops[slot]!, count: n[at + COUNT]!, dtype: this.#dtypes[slot]!, peer: n[at + PEER]!,
      state: STATES[n[at + STATE]!]!, enqueuedUs: wallUs(n[at + ENQUEUED]!), startedUs: ended === 0 ? 0 : wallUs(n[at + STARTED]!),
      endedUs: ended === 0 ? 0 : wallUs(ended),
    };
  }

  /** Entries with id >= `id` still in the ring, oldest first (copies, as they are now). */
  since(id: number): TraceEntry[] {
    const out: TraceEntry[] = [];
    for (let i = Math.max(id, this.#next - this.#capacity); i < this.#next; i++) out.push(this.#entry(i));
    return out;
  }

  /** The id the next operation gets. */
  get nextId(): number {
    return this.#next;
  }

  json(): CommTrace {
    const entries = this.since(0);
    // The first unfinished operation is the one running; those after it wait behind it.
    const running = entries.find((e) => e.endedUs === 0);
    let lastStartedSeq = this.lastCompletedSeq;
    if (running) {
      running.state = 'started';
      running.startedUs = Math.max(running.enqueuedUs, wallUs(this.#lastEnd));
      if (running.seq >= 0) lastStartedSeq = running.seq;
    }
    return { comm: this.name, rank: this.rank, size: this.size, lastEnqueuedSeq: this.lastEnqueuedSeq, lastStartedSeq, lastCompletedSeq: this.lastCompletedSeq, entries };
  }
}

// Keyed by the native communicator, which the Communicator and its split children share.
const records = new WeakMap<object, FlightRecord>();
const live = new Set<WeakRef<FlightRecord>>();

/** The record of `native` (a native communicator handle), made on first use. */
export function flightRecord(native: { rank: number; size: number }, name = 'world'): FlightRecord {
  let r = records.get(native);
  if (!r) {
    r = new FlightRecord(name, native.rank, native.size);
    records.set(native, r);
    live.add(new WeakRef(r));
  }
  return r;
}

/**
 * Communicator hook: records one submitted operation of `native`. A split's child
 * communicator is named after its parent, the split's sequence number and its color,
 * which every member of the child computes alike.
 */
export function recordOp(native: { rank: number; size: number }, op: string, count: number, dtype: string, peer: number,
  done: Promise<unknown>, color?: number): void {
  const parent = flightRecord(native);
  const seq = parent.op(op, count, dtype, peer, done);
  if (op === 'split') {
    done.then((child) => {
      if (child && typeof child === 'object') flightRecord(child as { rank: number; size: number }, `${parent.name}/split${seq}:${color ?? 0}`);
    }, () => {});
  }
}

/** The directory traces go to: $NCCL_NODE_TRACE_DIR, else $NCCL_NODE_FLIGHT_RECORDER_DIR, else the temp dir. */
export function traceDir(): string {
  return process.env.NCCL_NODE_TRACE_DIR || process.env.NCCL_NODE_FLIGHT_RECORDER_DIR || tmpdir();
}

/** This process's records, every live communicator. */
export function traceSnapshot(reason: string): TraceFile {
  const communicators: CommTrace[] = [];
  for (const ref of live) {
    const r = ref.deref();
    if (r) communicators.push(r.json());
    else live.delete(ref);
  }
  return { version: 1, pid: process.pid, reason, dumpedUs: nowUs(), source: 'js', communicators };
}

/**
 * Writes this process's records to <dir>/nccl-node-trace-rank<R>-<pid>.json (atomically:
 * a reader never sees half a file); returns the path. A later dump replaces it.
 */
export function dumpTraces(reason: string, dir = traceDir()): string {
  const snap = traceSnapshot(reason);
  const rank = snap.communicators.find((c) => c.comm === 'world')?.rank ?? snap.communicators[0]?.rank ?? Number(process.env.RANK ?? 0);
  const path = join(dir, `nccl-node-trace-rank${rank}-${process.pid}.json`);
  try {
    mkdirSync(dir, { recursive: true });
    writeFileSync(`${path}.tmp`, `${JSON.stringify(snap)}\n`);
    renameSync(`${path}.tmp`, path);
  } catch (err) {
    throw new NcclNodeError('ERR_IO', `could not write the trace to ${path}: ${(err as Error).message}`);
  }
  return path;
}

type TimeoutListener = (reason: string) => void;
const listeners = new Set<TimeoutListener>();

/** Called on every operation timeout of this process, after the local dump; returns the unsubscribe. */
export function onOpTimeout(f: TimeoutListener): () => void {
  listeners.add(f);
  return () => listeners.delete(f);
}

let lastDumpUs = 0;

function timedOut(reason: string): void {
  // One dump per burst: the operations queued behind a timed-out one fail right after it.
  if (nowUs() - lastDumpUs > 1_000_000) {
    lastDumpUs = nowUs();
    try {
      const path = dumpTraces(reason);
      process.emitWarning(`${reason}; trace written to ${path}`, { code: 'NCCL_NODE_TRACE_DUMP' });
    } catch (err) {
      process.emitWarning((err as Error).message, { code: 'NCCL_NODE_TRACE_DUMP' });
    }
  }
  for (const f of listeners) f(reason);
}
