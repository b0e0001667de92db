/**
 * The pieces of simulate() that follow a recovery path: where work stands inside a
 * checkpoint interval that also takes in-memory snapshots (closed form, so a snapshot
 * every step costs no loop turns), and which rung of the ladder a failure takes.
 */
import type { Rung } from './ladder-costs.js';

/** Recovery paths, cheapest first; each falls back to the ones after it. */
export const RECOVERY_PATHS = ['in-process', 'in-memory', 'full-restart'] as const;
export type RecoveryPath = (typeof RECOVERY_PATHS)[number];

/**
 * One checkpoint interval of `tau` seconds of work with an in-memory snapshot every
 * `s` seconds of work (s < tau; Infinity: none), each stalling training `m` seconds.
 * Snapshots sit at work positions s, 2s, ... below tau; the durable checkpoint at tau
 * stands for the last one. Offsets are wall seconds from the interval's start.
 */
export class SnapshotInterval {
  /** Snapshots per interval. */
  readonly count: number;
  /** Wall offset at which the interval's work is done (the durable checkpoint starts). */
  readonly end: number;

  constructor(readonly tau: number, readonly s: number, readonly m: number) {
    this.count = Number.isFinite(s) ? Math.max(0, Math.ceil(tau / s - 1e-9) - 1) : 0;
    this.end = tau + m * this.count;
  }

  /** Wall offset when work reaches x, before a snapshot at x stalls. */
  at(x: number): number {
    return x + this.m * Math.min(this.count, x <= 0 ? 0 : Math.ceil(x / this.s - 1e-9) - 1);
  }

  /** Work done and snapshots completed at wall offset y (y ≤ end: within the work). */
  pos(y: number): { x: number; done: number } {
    if (this.count === 0) return { x: Math.min(y, this.tau), done: 0 };
    const k = Math.floor(y / (this.s + this.m));
    if (k >= this.count) return { x: Math.min(this.tau, y - this.count * this.m), done: this.count };
    return { x: k * this.s + Math.min(y - k * (this.s + this.m), this.s), done: k };
  }
}

export interface RungChoice {
  rung: Rung;
  /** Whether a hot spare was taken. */
  spare: boolean;
}

export interface LadderState {
  path: RecoveryPath;
  hardware: boolean;
  transient: boolean;
  /** A hot spare is free now. */
  spareFree: boolean;
  /** The job may lose one more node and continue shrunk. */
  slack: boolean;
  /** The failed node's own host-memory copy of the last snapshot is intact (software faults keep the host). */
  ownCopy: boolean;
  /** The ring peer holding the failed node's replica is up and has held it since the snapshot. */
  peerCopy: boolean;
}

/**
 * The rung a failure takes under a path, falling back a rung whenever its condition fails:
 * - in-process: a transient fault retries the step; a software fault restarts the
 *   process in place (the node is fine); a lost node is replaced by a free hot spare
 *   (restart in place), else the job shrinks if it has slack; else in-memory;
 * - in-memory: restore from the snapshot while a copy of it survives (the node's own
 *   after a software fault, or its ring peer's), else full restart;
 * - full-restart: always possible (from the last durable checkpoint).
 */
export function chooseRung(s: LadderState): RungChoice {
  if (s.path === 'in-process') {
    if (!s.hardware) return { rung: s.transient ? 'retry' : 'restart-in-place', spare: false };
    if (s.spareFree) return { rung: 'restart-in-place', spare: true };
    if (s.slack) return { rung: 'shrink', spare: false };
  }
  if (s.path !== 'full-restart' && ((!s.hardware && s.ownCopy) || s.peerCopy)) return { rung: 'in-memory', spare: false };
  return { rung: 'full-restart', spare: false };
}
