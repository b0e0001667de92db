/**
 * The launcher's health monitor: watches the heartbeats its local ranks write to the
 * store (src/comm/heartbeat.ts) and turns a rank whose heartbeat stopped changing for
 * longer than the timeout (a SIGSTOPped or frozen process) into a failure of the gang,
 * as the launcher already does for a rank that exits. It also adds a dying rank's
 * fatal-error report to the failure's message, and lets the launcher wait, briefly,
 * until the surviving ranks have aborted their collectives before it stops them.
 *
 * Under --restart-scope rank the monitor keeps watching the others after a miss, and
 * a restarted rank replaces its entry: beats that still carry the dead process's pid
 * are not the new process's, so they neither count as beating nor as missing.
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

/** Returns true to keep watching the other ranks (the failed one is skipped until replaced). */
export type OnMissed = (record: FailureRecord) => boolean | void;

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
  /** Per rank: the pid of a previous life, whose beats are ignored. */
  private readonly stale = new Map<number, number>();
  /** Ranks reported missing and not replaced yet. */
  private readonly reported = new Set<number>();
  private readonly ranks: MonitoredRank[];

  private constructor(
    private readonly view: KeyView,
    ranks: readonly MonitoredRank[],
    private readonly o: MonitorOptions,
    private readonly signal: AbortSignal,
  ) {
    this.ranks = [...ranks];
  }

  /**
   * Starts watching `ranks` until `signal` aborts; `onFailure` gets the first rank that
   * missed its heartbeats, and more ranks' only while it returns true.
   */
  static start(
    view: KeyView,
    ranks: readonly MonitoredRank[],
    o: MonitorOptions,
    signal: AbortSignal,
    onFailure: OnMissed,
  ): HealthMonitor {
    const m = new HealthMonitor(view, ranks, o, signal);
    if (o.intervalMs > 0) m.loop(onFailure).catch(() => {}); // a lost store is the launcher's other watches' to report
    return m;
  }

  /** A restarted rank takes the place of its previous life (`previousPid`). */
  replace(rank: MonitoredRank, previousPid: number | undefined): void {
    const i = this.ranks.findIndex((r) => r.rank === rank.rank);
    if (i < 0) return;
    this.ranks[i] = rank;
    this.seen.delete(rank.rank);
    this.reported.delete(rank.rank);
    if (previousPid !== undefined) this.stale.set(rank.rank, previousPid);
  }

  /** Polls a few times per interval, reporting ranks that missed their heartbeats. */
  private async loop(onFailure: OnMissed): Promise<void> {
    const pollMs = Math.min(500, Math.max(20, this.o.intervalMs / 4));
    while (!this.signal.aborted) {
      await sleep(pollMs);
      for (const r of [...this.ranks]) {
        if (this.signal.aborted) return;
        if (r.exited() || this.reported.has(r.rank) || this.seen.get(r.rank)?.closed) continue;
        const text = await this.view.read(heartbeatKey(r.rank));
        const now = Date.now();
        const last = this.seen.get(r.rank);
        // Not beating yet (--join-timeout covers a rank that never starts), or a previous life's beat.
        if (text === undefined || (this.stale.has(r.rank) && parse<Heartbeat>(text)?.pid === this.stale.get(r.rank))) continue;
        if (last === undefined || last.text !== text) {
          this.seen.set(r.rank, { text, at: now, closed: parse<Heartbeat>(text)?.closed === true });
          continue;
        }
        if (now - last.at > this.o.timeoutMs && !r.exited() && !this.signal.aborted) {
          this.reported.add(r.rank);
          if (onFailure(this.missed(r, now - last.at)) !== true) return;
        }
      }
    }
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
