/**
 * The launcher's health monitor: watches the heartbeats its local ranks write to the
 * store (src/comm/heartbeat.ts) and turns a rank whose heartbeat stopped changing for
 * longer than the timeout (a SIGSTOPped or frozen process) into a failure of the gang,
 * as the launcher already does for a rank that exits. It also adds a dying rank's
 * fatal-error report to the failure's message, and lets the launcher wait, briefly,
 * until the surviving ranks have aborted their collectives before it stops them.
 *
 * Times are the monitor's own: it notes when a rank's heartbeat value last changed,
 * so clocks on other hosts do not matter, and a monitor that was itself held up does
 * not blame a rank that kept beating meanwhile.
 */
import { abortedKey, fatalKey, heartbeatKey, type FatalReport, type Heartbeat } from '../comm/heartbeat.js';
import type { FailureRecord } from './join.js';
import type { KeyView } from './keyview.js';

export interface MonitoredRank {
  rank: number;
  pid: number | undefined;
  /** Whether the launcher has seen this rank exit (its exit is handled elsewhere). */
  exited(): boolean;
}

export interface MonitorOptions {
  intervalMs: number;
  timeoutMs: number;
  node: number;
  host: string;
}

/** Longest wait for survivors to abort before they are signalled anyway. */
export const ABORT_WAIT_MS = 1_000;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface Seen {
  text: string;
  at: number;
  closed: boolean;
}

function parse<T>(text: string | undefined): T | undefined {
  if (text === undefined) return undefined;
  try {
    return JSON.parse(text) as T;
  } catch {
    return undefined;
  }
}

export class HealthMonitor {
  private readonly seen = new Map<number, Seen>();

  private constructor(
    private readonly view: KeyView,
    private readonly ranks: readonly MonitoredRank[],
    private readonly o: MonitorOptions,
    private readonly signal: AbortSignal,
  ) {}

  /** Starts watching `ranks` until `signal` aborts; `onFailure` gets at most one record. */
  static start(
    view: KeyView,
    ranks: readonly MonitoredRank[],
    o: MonitorOptions,
    signal: AbortSignal,
    onFailure: (record: FailureRecord) => void,
  ): HealthMonitor {
    const m = new HealthMonitor(view, ranks, o, signal);
    if (o.intervalMs > 0) {
      m.loop().then(
        (record) => {
          if (record !== undefined && !signal.aborted) onFailure(record);
        },
        () => {}, // a lost store is the launcher's other watches' to report
      );
    }
    return m;
  }

  /** Polls a few times per interval; resolves with the first rank that missed its heartbeats. */
  private async loop(): Promise<FailureRecord | undefined> {
    const pollMs = Math.min(500, Math.max(20, this.o.intervalMs / 4));
    while (!this.signal.aborted) {
      await sleep(pollMs);
      for (const r of this.ranks) {
        if (this.signal.aborted) return undefined;
        if (r.exited() || this.seen.get(r.rank)?.closed) continue;
        const text = await this.view.read(heartbeatKey(r.rank));
        const now = Date.now();
        const last = this.seen.get(r.rank);
        if (text === undefined) continue; // not beating yet: --join-timeout covers a rank that never starts
        if (last === undefined || last.text !== text) {
          this.seen.set(r.rank, { text, at: now, closed: parse<Heartbeat>(text)?.closed === true });
          continue;
        }
        if (now - last.at > this.o.timeoutMs && !r.exited()) return this.missed(r, now - last.at);
      }
    }
    return undefined;
  }

  private missed(r: MonitoredRank, silentMs: number): FailureRecord {
    const pid = r.pid ?? parse<Heartbeat>(this.seen.get(r.rank)?.text)?.pid;
    const who = `rank ${r.rank}${pid !== undefined ? ` (pid ${pid})` : ''}`;
    return {
      reason: 'heartbeat',
      rank: r.rank,
      ...(pid !== undefined ? { pid } : {}),
      exitCode: 1,
      node: this.o.node,
      host: this.o.host,
      message: `${who} missed heartbeats for ${(silentMs / 1000).toFixed(1)} s (timeout ${Number((this.o.timeoutMs / 1000).toFixed(3))} s): hung or stopped`,
    };
  }

  /** Adds the fatal error a failed rank reported before it died, if it did, to the message. */
  async annotate(record: FailureRecord): Promise<FailureRecord> {
    if (record.rank === undefined || (record.reason !== 'exit' && record.reason !== 'signal')) return record;
    try {
      const fatal = parse<FatalReport>(await this.view.read(fatalKey(record.rank)));
      if (fatal === undefined || typeof fatal.message !== 'string') return record;
      return { ...record, message: `${record.message}: ${fatal.message.slice(0, 500)}` };
    } catch {
      return record;
    }
  }

  /**
   * Waits (at most ABORT_WAIT_MS) until each running rank that heartbeats has aborted its
   * collectives on the published failure (or exited), so its pending Works have rejected
   * with the cause before the launcher signals it.
   */
  async awaitAborts(ranks: readonly number[]): Promise<void> {
    let left = this.ranks.filter((r) => ranks.includes(r.rank) && this.seen.has(r.rank) && !this.seen.get(r.rank)!.closed);
    const deadline = Date.now() + ABORT_WAIT_MS;
    while (left.length > 0 && Date.now() < deadline) {
      const done = await Promise.all(left.map(async (r) => r.exited() || (await this.view.has(abortedKey(r.rank)).catch(() => true))));
      left = left.filter((_, i) => !done[i]);
      if (left.length > 0) await sleep(10);
    }
  }
}
