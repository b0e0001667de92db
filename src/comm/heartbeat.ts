/**
 * Failure detection inside a rank started by `nccl-node run` (the launcher's side is
 * src/launch/health-monitor.ts). Keys, in the rank's store scope:
 *
 * - `nccl-node/heartbeat/<rank>`: JSON {pid, seq}, rewritten every interval by a timer;
 *   {pid, seq, closed: true} once the rank destroyed its communicators, so a rank that
 *   goes on without them is not taken for hung. A native collective blocks only its
 *   own thread, so the timer keeps beating while the rank waits in one: the heartbeat
 *   says the process is alive (a SIGSTOPped or frozen process stops beating). A
 *   blocking call (allReduceSync) holds the JS thread and the timer with it: while it
 *   waits for its peers a native thread writes the key instead, {pid, seq, held: true}
 *   (native/core/held_beats.h). JavaScript that holds the thread itself gets no such
 *   cover: a rank stuck in its own code is still taken for hung.
 * - `nccl-node/fatal/<rank>`: JSON {pid, message}, written before the rank dies of an
 *   uncaught exception; the launcher names it in the failure.
 * - `nccl-node/failed` (src/launch/join.ts): the launchers' failure record. The rank
 *   waits on it and, when it appears, aborts its communicators: every in-flight Work
 *   rejects with ERR_PEER_LOST naming the failed rank and the cause.
 * - `nccl-node/aborted/<rank>`: written once this rank has aborted, so the launcher
 *   can stop it (SIGTERM) right after, not before its Works rejected.
 */
import { NcclNodeError } from '../errors.js';
import { FAILED_KEY, parseFailure, type FailureRecord } from '../launch/join.js';
import { binding } from '../native.js';
import type { StoreClient } from '../rendezvous/client.js';
import type { Communicator } from './communicator.js';

export const HEARTBEAT_KEY_PREFIX = 'nccl-node/heartbeat/';
export const FATAL_KEY_PREFIX = 'nccl-node/fatal/';
export const ABORTED_KEY_PREFIX = 'nccl-node/aborted/';
export const heartbeatKey = (rank: number): string => `${HEARTBEAT_KEY_PREFIX}${rank}`;
export const fatalKey = (rank: number): string => `${FATAL_KEY_PREFIX}${rank}`;
export const abortedKey = (rank: number): string => `${ABORTED_KEY_PREFIX}${rank}`;

/** Environment the launcher passes to its ranks. */
export const HEARTBEAT_INTERVAL_ENV = 'NCCL_NODE_HEARTBEAT_INTERVAL_MS';

export interface Heartbeat {
  pid: number;
  seq: number;
  closed?: boolean;
  /** Written by the native thread while a blocking call held the JS thread (its own seq). */
  held?: boolean;
}

export interface FatalReport {
  pid: number;
  message: string;
}

/** What onPeerFailure listeners get: the launchers' record of the first failure. */
export type PeerFailure = FailureRecord;

/** Longest single WAIT on the failure key; longer watches repeat it. */
const WAIT_CHUNK_MS = 10 * 60 * 1000;
/** How long a dying rank tries to report its fatal error before it exits anyway. */
const FATAL_REPORT_MS = 1_000;
/**
 * How long a collective that failed by itself (a peer's connection dropped) waits for
 * the launcher to name the cause: it sees a dead rank's exit within milliseconds and
 * waits at most 400 ms for exits that came with it (launcher.ts, settleFailure).
 */
const EXPLAIN_WAIT_MS = 1_500;

const listeners = new Set<(failure: PeerFailure) => void>();
let active: Detection | undefined;

/**
 * Calls `listener` once the launcher reports a failure in the job (a rank died, hung
 * or reported a fatal error), right after this rank's communicators were aborted.
 * Returns a function that removes the listener.
 */
export function onPeerFailure(listener: (failure: PeerFailure) => void): () => void {
  listeners.add(listener);
  if (active?.failure !== undefined) queueMicrotask(() => listener(active!.failure!));
  return () => listeners.delete(listener);
}

/**
 * Errors that say a peer went away: Gloo's dropped connection, an abort, and NCCL's
 * asynchronous remote error as the watchdog reports it.
 */
function lostPeer(err: unknown): boolean {
  if (!(err instanceof NcclNodeError)) return false;
  if (err.code === 'ERR_PEER_LOST' || err.code === 'ERR_COMM_ABORTED') return true;
  return err.code === 'ERR_NCCL' && /remote process exited|network error/i.test(err.message);
}

/** The error every in-flight and later call of an aborted communicator gets. */
export function peerLostError(rank: number, failure: FailureRecord, cause?: unknown): NcclNodeError {
  const err = new NcclNodeError('ERR_PEER_LOST', `rank ${rank}: the job failed: ${failure.message} (node ${failure.node}, ${failure.host})`, {
    failedRank: failure.rank,
    pid: failure.pid,
    reason: failure.reason,
    signal: failure.signal,
    node: failure.node,
    host: failure.host,
  });
  if (cause !== undefined) (err as Error & { cause?: unknown }).cause = cause;
  return err;
}

class Detection {
  failure: FailureRecord | undefined;
  readonly comms = new Set<Communicator>();
  private seq = 0;
  private readonly timer: NodeJS.Timeout;
  private stopped = false;
  private ack: Promise<unknown> | undefined;
  private readonly failed: Promise<FailureRecord>;
  private resolveFailed!: (f: FailureRecord) => void;
  private readonly onUncaught = (err: unknown, origin: string): void => this.uncaught(err, origin);

  constructor(
    private readonly client: StoreClient,
    readonly rank: number,
    intervalMs: number,
  ) {
    this.failed = new Promise((resolve) => (this.resolveFailed = resolve));
    this.beat();
    // Unref'd: heartbeats never keep a finished rank alive.
    this.timer = setInterval(() => this.beat(), intervalMs).unref();
    try {
      // Whole milliseconds: the launcher takes fractional seconds (--heartbeat-interval 0.0333).
      binding().heldBeatsStart({
        host: client.host, port: client.port, token: client.token, key: heartbeatKey(rank), pid: process.pid,
        intervalMs: Math.max(1, Math.round(intervalMs)),
      });
    } catch (err) {
      // The timer still beats; only a blocking call's long wait goes uncovered.
      process.emitWarning(`heartbeats during blocking calls are off: ${err instanceof Error ? err.message : String(err)}`);
    }
    process.on('uncaughtException', this.onUncaught);
    void this.watch();
  }

  private beat(closed = false): Promise<void> {
    const hb: Heartbeat = { pid: process.pid, seq: this.seq++, ...(closed ? { closed } : {}) };
    // A lost store shows up in the collectives; a missed beat is the launcher's to judge.
    return this.client.set(heartbeatKey(this.rank), JSON.stringify(hb)).catch(() => {});
  }

  private async watch(): Promise<void> {
    while (!this.stopped) {
      try {
        await this.client.wait([FAILED_KEY], { timeoutMs: WAIT_CHUNK_MS });
      } catch (err) {
        if (err instanceof NcclNodeError && err.code === 'ERR_TIMEOUT') continue;
        return; // closed, or the store is gone: nothing more to learn here
      }
      let text = '';
      try {
        text = await this.client.getString(FAILED_KEY);
      } catch {
        return;
      }
      this.fail(parseFailure(text));
      return;
    }
  }

  private fail(failure: FailureRecord): void {
    if (this.failure !== undefined || this.stopped) return;
    this.failure = failure;
    this.resolveFailed(failure);
    // Written once the aborts are done and the rejected Works' handlers have run (the
    // launcher signals this rank when it sees it); stop() waits for it before closing.
    this.ack = new Promise((resolve) => setImmediate(resolve))
      .then(() => this.client.set(abortedKey(this.rank), String(process.pid)))
      .catch(() => {});
    for (const c of [...this.comms]) c.abort(peerLostError(this.rank, failure));
    for (const l of listeners) {
      try {
        l(failure);
      } catch (err) {
        process.emitWarning(`onPeerFailure listener threw: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  }

  /** A collective failed by itself (a peer's connection dropped): wait briefly for the cause. */
  async explain(err: unknown): Promise<unknown> {
    if (!lostPeer(err)) return err;
    let timer: NodeJS.Timeout | undefined;
    const failure = await Promise.race([
      this.failed,
      new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), EXPLAIN_WAIT_MS).unref())),
    ]);
    clearTimeout(timer);
    return failure === undefined ? err : peerLostError(this.rank, failure, err);
  }

  private uncaught(err: unknown, origin: string): void {
    const alone = process.listenerCount('uncaughtException') === 1;
    const message = err instanceof Error ? `${err.name}${(err as { code?: unknown }).code !== undefined ? ` [${String((err as { code?: unknown }).code)}]` : ''}: ${err.message}` : String(err);
    const report: FatalReport = { pid: process.pid, message: origin === 'unhandledRejection' ? `unhandled rejection: ${message}` : message };
    const written = this.client.set(fatalKey(this.rank), JSON.stringify(report)).catch(() => {});
    if (!alone) return; // the program handles its exceptions itself
    // What Node prints and does without a listener: the stack, then exit code 1.
    process.stderr.write(`${err instanceof Error ? (err.stack ?? message) : `Uncaught ${message}`}\n`);
    process.exitCode = 1;
    setTimeout(() => process.exit(1), FATAL_REPORT_MS);
    void written.then(() => process.exit(1));
  }

  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    clearInterval(this.timer);
    binding().heldBeatsStop();
    process.off('uncaughtException', this.onUncaught);
    await this.ack;
    if (this.failure === undefined) await this.beat(true);
  }
}

/**
 * Starts heartbeats and the failure watch when the launcher asked for them (its env);
 * true when this call started them.
 */
export function startFailureDetection(client: StoreClient, rank: number, env: NodeJS.ProcessEnv = process.env): boolean {
  if (active !== undefined) return false;
  if (env['NCCL_NODE_LAUNCHER'] !== '1') return false;
  const interval = Number(env[HEARTBEAT_INTERVAL_ENV] ?? '0');
  if (!Number.isFinite(interval) || interval <= 0) return false;
  active = new Detection(client, rank, interval);
  return true;
}

/** Stops what startFailureDetection started (init() failed before a communicator existed). */
export async function stopFailureDetection(): Promise<void> {
  const d = active;
  active = undefined;
  await d?.stop();
}

/** Aborts `comm` with the failure if one is known, and does so later if one comes. */
export function watchCommunicator(comm: Communicator): void {
  const d = active;
  if (d === undefined) return;
  d.comms.add(comm);
  if (d.failure !== undefined) comm.abort(peerLostError(d.rank, d.failure));
}

/** The hook a communicator uses for errors that may have a known cause. */
export function explainFailure(): ((err: unknown) => Promise<unknown>) | undefined {
  const d = active;
  return d === undefined ? undefined : (err) => d.explain(err);
}

/** The communicator is done with (destroyed or aborted); the last one stops the heartbeats. */
export async function releaseCommunicator(comm: Communicator): Promise<void> {
  const d = active;
  if (d === undefined || !d.comms.delete(comm) || d.comms.size > 0) return;
  active = undefined;
  await d.stop();
}
