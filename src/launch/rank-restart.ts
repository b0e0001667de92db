/**
 * --restart-scope rank: the policy and bookkeeping for restarting one failed rank alone
 * while the others keep running (the launcher spawns it; launcher.ts restartAlone).
 *
 * A rank that exits non-zero, dies of a signal, or misses its heartbeats (the launcher
 * SIGKILLs its process group first) is restarted with the same RANK and LOCAL_RANK,
 * NCCL_NODE_FT_REJOIN=1 and NCCL_NODE_RANK_RESTART_COUNT=<its restarts>; the survivors
 * see its connections close and re-form their group in-process (src/ft), and the new
 * process joins it (ElasticGroup.start). Nothing is published under the gang's failure
 * key, so no rank and no other node stops.
 *
 * The gang path (stop everything, re-run the gang or end the job) still handles:
 * EXIT_FULL_RESTART (the ranks asked for it), restarts used up (rank restarts and gang
 * restarts together count against --max-restarts), an interrupt, a lost node, a lost
 * store, and a join timeout.
 *
 * Every rank restart is printed on stderr and recorded in the store under
 * `nccl-node/rank-restart/<rank>/<n>` (JSON: the failure record, the new pid, the
 * restart's number), beside the gang's `nccl-node/failed` (join.ts).
 */
import { EXIT_FULL_RESTART } from '../ft/ladder.js';
import type { FailureRecord } from './join.js';
import type { KeyView } from './keyview.js';
import type { Resolved } from './options.js';
import { signalExitCode } from './process-group.js';

export const RANK_RESTART_KEY_PREFIX = 'nccl-node/rank-restart/';
export const rankRestartKey = (rank: number, n: number): string => `${RANK_RESTART_KEY_PREFIX}${rank}/${n}`;

export interface RankExit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Where {
  node: number;
  host: string;
}

export class RankRestarts {
  /** Rank restarts made on this node, over all attempts (they count against --max-restarts). */
  private used = 0;
  /** Restarts of each rank in the current attempt. */
  private readonly lives = new Map<number, number>();
  /** Ranks killed for missed heartbeats: why, until their exit is seen. */
  private readonly missed = new Map<number, FailureRecord>();

  constructor(private readonly o: Pick<Resolved, 'restartScope' | 'maxRestarts'>) {}

  /** Rank restarts made so far. */
  get count(): number {
    return this.used;
  }

  /** A new gang attempt: every rank is on its first life. */
  reset(): void {
    this.lives.clear();
    this.missed.clear();
  }

  /** How many times `rank` was restarted alone in this attempt. */
  restartsOf(rank: number): number {
    return this.lives.get(rank) ?? 0;
  }

  /**
   * Whether a failure restarts one rank alone, with `gangRestarts` gang restarts made:
   * not with --restart-scope gang, not when restarts are used up, and not for a rank
   * that asked for the gang path (EXIT_FULL_RESTART).
   */
  allowed(gangRestarts: number, exit?: RankExit): boolean {
    if (this.o.restartScope !== 'rank') return false;
    if (gangRestarts + this.used >= this.o.maxRestarts) return false;
    return exit?.code !== EXIT_FULL_RESTART;
  }

  /** The monitor found `record.rank` hung; the launcher kills it and restarts it on its exit. */
  noteMissed(record: FailureRecord): void {
    if (record.rank !== undefined) this.missed.set(record.rank, record);
  }

  /** Why `rank` (pid `pid`) failed: the missed heartbeats it was killed for, or its exit. */
  failureOf(rank: number, pid: number | undefined, exit: RankExit, where: Where): FailureRecord {
    const missed = this.missed.get(rank);
    this.missed.delete(rank);
    if (missed !== undefined) return missed;
    const base = { rank, ...where, ...(pid !== undefined ? { pid } : {}) };
    if (exit.signal !== null) {
      return { ...base, reason: 'signal', signal: exit.signal, exitCode: signalExitCode(exit.signal), message: `rank ${rank} (pid ${pid ?? 0}) was killed by signal ${exit.signal}` };
    }
    return { ...base, reason: 'exit', exitCode: Math.min(255, Math.max(1, exit.code ?? 1)), message: `rank ${rank} (pid ${pid ?? 0}) exited with code ${exit.code}` };
  }

  /** Counts a restart of `record.rank`: its new restart count, and the line the launcher prints. */
  take(record: FailureRecord, gangRestarts: number, how?: string): { restarts: number; line: string } {
    const rank = record.rank!;
    const restarts = this.restartsOf(rank) + 1;
    this.lives.set(rank, restarts);
    this.used++;
    const n = gangRestarts + this.used;
    return { restarts, line: `${record.message}; ${how ?? `restarting rank ${rank}`} (restart ${n} of ${this.o.maxRestarts}), the other ranks keep running` };
  }

  /** Records the restart in the store, for people and tools reading the job's keys. */
  async publish(view: KeyView, record: FailureRecord, restarts: number, pid: number | undefined): Promise<void> {
    await view.write(rankRestartKey(record.rank!, restarts), JSON.stringify({ ...record, restart: restarts, restartsUsed: this.used, newPid: pid ?? null }));
  }
}
