/**
 * The recovery ladder: per fault, the cheapest action that can work, escalating when
 * it cannot.
 *
 *   1. retry            a transient ERR_TIMEOUT on a communicator that is still usable,
 *                       at most `maxRetries` times per step: the step runs again.
 *   2. re-form          a lost peer or an unusable communicator: abort it and run a
 *                       membership round (membership.ts). Its outcome is named by size:
 *      shrink           fewer members than before: continue at the smaller size;
 *      restart in place as many as before (a spare or the restarted rank came in);
 *      grow             more than before (joiners admitted at a step boundary).
 *   3. full restart     fewer than `minSize` members, a global batch the new size does
 *                       not divide, or a round that failed: exit with EXIT_FULL_RESTART so
 *                       `nccl-node run --max-restarts` restarts the gang from its
 *                       newest checkpoint.
 *
 * Every decision is logged (pino) with its measured cost and counted (prom-client).
 */
import { pino, type Logger } from 'pino';
import { Counter, Registry } from 'prom-client';
import { isNcclNodeError } from '../errors.js';

/** Distinct from a crash (1) and a signal (128+n): the launcher restarts the gang on any non-zero code. */
export const EXIT_FULL_RESTART = 75;

export type FaultAction = 'retry' | 'reform' | 'full-restart' | 'raise';
export type RoundAction = 'shrink' | 'restart-in-place' | 'grow' | 'full-restart';
export type Action = Exclude<FaultAction, 'reform'> | RoundAction;

export interface LadderOptions {
  /** Retries of one step after a transient timeout (default 1). */
  maxRetries?: number;
  /** Fewest members to continue with (default 1). */
  minSize?: number;
  /** Sequences per step: the new size must divide it (the global batch is kept constant). */
  globalBatch?: number;
  logger?: Logger;
  registry?: Registry;
}

export interface Fault {
  /** NcclNodeError code, or 'ERR_UNKNOWN'. */
  code: string;
  /** Retries already made for this step. */
  retries: number;
  /** The communicator's state is still 'ok'. */
  commUsable: boolean;
}

export interface RecordExtra {
  generation?: number;
  size?: number;
  step?: number;
  /** Parts of the cost: the membership round, the live state transfer (ms, bytes sent or received). */
  roundMs?: number;
  transferMs?: number;
  transferBytes?: number;
  /** How the generation's communicator was made, and what that took (ms). */
  via?: 'ncclCommShrink' | 'init';
  commMs?: number;
}

export interface Decision {
  action: Action;
  reason: string;
}

/** Faults of the communicator (NCCL reports a dead peer as ERR_NCCL: the communicator is broken either way). */
const PEER_CODES = new Set(['ERR_PEER_LOST', 'ERR_COMM_ABORTED', 'ERR_TIMEOUT', 'ERR_BACKEND', 'ERR_NCCL']);

export function faultOf(err: unknown, retries: number, commUsable: boolean): Fault {
  return { code: isNcclNodeError(err) ? err.code : 'ERR_UNKNOWN', retries, commUsable };
}

export class RecoveryLadder {
  readonly maxRetries: number;
  readonly minSize: number;
  readonly globalBatch: number | undefined;
  readonly logger: Logger;
  readonly registry: Registry;
  readonly #decisions: Counter;
  readonly #seconds: Counter;
  /** Every decision with its cost, in order (what the metrics count). */
  readonly history: (Decision & { ms: number } & RecordExtra)[] = [];

  constructor(o: LadderOptions = {}) {
    this.maxRetries = o.maxRetries ?? 1;
    this.minSize = o.minSize ?? 1;
    this.globalBatch = o.globalBatch;
    this.logger = o.logger ?? pino({ name: 'nccl-node-ft' }, pino.destination(2));
    this.registry = o.registry ?? new Registry();
    const registers = [this.registry];
    this.#decisions = new Counter({ name: 'nccl_node_ft_decisions_total', help: 'Recovery-ladder decisions, by action.', labelNames: ['action'], registers });
    this.#seconds = new Counter({ name: 'nccl_node_ft_recovery_seconds_total', help: 'Time spent recovering (fault to the step loop running again), by action.', labelNames: ['action'], registers });
  }

  /** First rung: what to do about a failed step. */
  onFault(f: Fault): { action: FaultAction; reason: string } {
    if (f.code === 'ERR_TIMEOUT' && f.commUsable && f.retries < this.maxRetries) {
      return { action: 'retry', reason: `transient timeout, retry ${f.retries + 1} of ${this.maxRetries}` };
    }
    if (PEER_CODES.has(f.code)) {
      return { action: 'reform', reason: f.code === 'ERR_TIMEOUT' ? `timeout after ${f.retries} retries: a peer is gone or stuck` : `${f.code}: a peer is gone` };
    }
    return { action: 'raise', reason: `${f.code} is not a communication fault` };
  }

  /** Second rung: what a finished membership round means. */
  onRound(previous: number, members: number): Decision {
    if (members < this.minSize) return { action: 'full-restart', reason: `${members} members, fewer than minSize ${this.minSize}` };
    if (this.globalBatch !== undefined && this.globalBatch % members !== 0) {
      return { action: 'full-restart', reason: `global batch ${this.globalBatch} does not divide by ${members} members` };
    }
    if (members < previous) return { action: 'shrink', reason: `${previous - members} of ${previous} members lost` };
    if (members === previous) return { action: 'restart-in-place', reason: `re-formed at ${members} members` };
    return { action: 'grow', reason: `${members - previous} joined` };
  }

  /** Logs and counts a decision once its cost is known. */
  record(d: Decision, ms: number, extra: RecordExtra = {}): void {
    this.history.push({ ...d, ms, ...extra });
    this.#decisions.inc({ action: d.action });
    this.#seconds.inc({ action: d.action }, ms / 1000);
    this.logger.info({ ft: d.action, reason: d.reason, ms: Math.round(ms * 10) / 10, ...extra }, `recovery: ${d.action}`);
  }
}
