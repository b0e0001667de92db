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

/** One communicator's ring of operations. */
export class FlightRecord {
  readonly #ring: TraceEntry[] = [];
  readonly #capacity = capacity();
  #next = 0;
  #seq = 0;
  #lastEnd = 0;
  lastEnqueuedSeq = -1;
  lastCompletedSeq = -1;

  constructor(public name: string, readonly rank: number, readonly size: number) {}

  /** Records a submitted operation; `done` settles when it finishes. */
  op(op: string, count: number, dtype: string, peer: number, done: Promise<unknown>): TraceEntry {
    const e = this.begin(op, count, dtype, peer);
    done.then(() => this.completed(e), (err: unknown) => this.failed(e, err));
    return e;
  }

  /**
   * Records a submitted operation whose end the caller reports: completed() or failed().
   * `atMs`: when, as performance.now() read it (a caller that reads the clock anyway
   * hands its reading over: a clock read costs about as much as the rest of this).
   */
  begin(op: string, count: number, dtype: string, peer: number, atMs = performance.now()): TraceEntry {
    return this.#add(op, count, dtype, peer, op === 'send' || op === 'recv', atMs);
  }

  completed(e: TraceEntry, atMs = performance.now()): void {
    this.#end(e, 'completed', atMs);
  }

  failed(e: TraceEntry, err: unknown, atMs = performance.now()): void {
    const code = (err as { code?: string } | null)?.code;
    this.#end(e, code === 'ERR_TIMEOUT' ? 'timeout' : code === 'ERR_COMM_ABORTED' ? 'aborted' : 'failed', atMs);
    if (code === 'ERR_TIMEOUT') timedOut(`${e.op} #${e.seq} on rank ${this.rank} of ${this.size} timed out`);
  }

  /** A call this rank refused: it still took its sequence number (and failed at once). */
  refused(op: string): void {
    if (op === 'send' || op === 'recv') return;
    const now = performance.now();
    this.#end(this.#add(op, 0, '', -1, false, now), 'failed', now);
  }

  #add(op: string, count: number, dtype: string, peer: number, p2p: boolean, atMs: number): TraceEntry {
    const seq = p2p ? -1 : this.#seq++;
    if (!p2p) this.lastEnqueuedSeq = seq;
    const e: TraceEntry = { id: this.#next++, seq, op, count, dtype, peer, state: 'scheduled', enqueuedUs: wallUs(atMs), startedUs: 0, endedUs: 0 };
    if (this.#capacity > 0) this.#ring[e.id % this.#capacity] = e;
    return e;
  }

  #end(e: TraceEntry, state: OpState, atMs: number): void {
    e.endedUs = wallUs(atMs);
    e.startedUs = Math.max(e.enqueuedUs, Math.min(this.#lastEnd, e.endedUs));
    e.state = state;
    this.#lastEnd = e.endedUs;
    if (state === 'completed' && e.seq >= 0) this.lastCompletedSeq = Math.max(this.lastCompletedSeq, e.seq);
  }

  /** Entries with id >= `id` still in the ring, oldest first (live objects: they update as operations finish). */
  since(id: number): TraceEntry[] {
    const out: TraceEntry[] = [];
    for (let i = Math.max(id, this.#next - this.#capacity); i < this.#next; i++) out.push(this.#ring[i % this.#capacity]!);
    return out;
  }

  /** The id the next operation gets. */
  get nextId(): number {
    return this.#next;
  }

  json(): CommTrace {
    const entries = this.since(0).map((e) => ({ ...e }));
    // The first unfinished operation is the one running; those after it wait behind it.
    const running = entries.find((e) => e.endedUs === 0);
    let lastStartedSeq = this.lastCompletedSeq;
    if (running) {
      running.state = 'started';
      running.startedUs = Math.max(running.enqueuedUs, this.#lastEnd);
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
  const e = parent.op(op, count, dtype, peer, done);
  if (op === 'split') {
    done.then((child) => {
      if (child && typeof child === 'object') flightRecord(child as { rank: number; size: number }, `${parent.name}/split${e.seq}:${color ?? 0}`);
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
