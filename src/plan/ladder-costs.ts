/**
 * What each rung of the recovery ladder (src/ft/ladder.ts, docs/fault-tolerance.md)
 * costs the simulated job, phase by phase (detect, abort, rendezvous, restore, first
 * step: the phases bench/ft/recovery.ts times), for software faults (the node lives)
 * and hardware faults (the node is lost).
 *
 * Defaults (defaultRungCosts) are built from the run-wide detectSeconds and
 * restartSeconds and the measurements the repository documents; a recovery
 * benchmark's JSON (readRecoveryCosts) replaces them, scaled to the simulated job by
 * scaleBenchCosts' rule.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { NcclNodeError } from '../errors.js';
import { parseInput } from './schema.js';

export const PHASES = ['detect', 'abort', 'rendezvous', 'restore', 'firstStep'] as const;
export type Phase = (typeof PHASES)[number];
export type Phases = Record<Phase, number>;

/** The rungs the simulation can take (the ladder's re-form split by outcome; in-memory is a full restart that loads a peer's host-memory snapshot). */
export const RUNGS = ['retry', 'restart-in-place', 'shrink', 'grow', 'in-memory', 'full-restart'] as const;
export type Rung = (typeof RUNGS)[number];
export type FaultClass = 'software' | 'hardware';
export type RungCosts = Record<Rung, Record<FaultClass, Phases>>;

const nonneg = z.number().nonnegative();
const phasesSchema = z.strictObject({
  detect: nonneg.default(0), abort: nonneg.default(0), rendezvous: nonneg.default(0), restore: nonneg.default(0), firstStep: nonneg.default(0),
});
const rungSchema = z.strictObject({ software: phasesSchema.optional(), hardware: phasesSchema.optional() });
/** Per rung, seconds per phase at the simulated scale; a rung or class left out keeps its default (a class left out takes the other's). */
export const recoveryCostsSchema = z.strictObject(Object.fromEntries(RUNGS.map((r) => [r, rungSchema.optional()])) as Record<Rung, z.ZodOptional<typeof rungSchema>>);
export type RecoveryCostsInput = z.input<typeof recoveryCostsSchema>;

export const total = (p: Phases): number => p.detect + p.abort + p.rendezvous + p.restore + p.firstStep;
const phases = (p: Partial<Phases>): Phases => ({ detect: 0, abort: 0, rendezvous: 0, restore: 0, firstStep: 0, ...p });
const both = (p: Partial<Phases>): Record<FaultClass, Phases> => ({ software: phases(p), hardware: phases(p) });

/** Sizes the scaling rule needs; see scaleBenchCosts. */
export interface Scale {
  nodes: number;
  /** Heartbeat / collective timeout of the simulated job: what detection of a silent fault waits for. */
  heartbeatTimeoutSeconds: number;
  /** Training state (the checkpoint), bytes in all; 0: negligible against the fixed costs. */
  stateBytes: number;
  /** Aggregate read bandwidth of the checkpoint storage, bytes/s. */
  storageBandwidth: number;
  /** Per-node network bandwidth (a peer's copy or a live transfer), bytes/s. */
  networkBandwidth: number;
  /** Step time of the simulated job (the benchmark's first-step phase is one of its steps plus warm-up). */
  stepSeconds: number;
}

/**
 * A shrink's or restart in place's membership round at 2 nodes: it closes as soon as the
 * lost member is known gone (src/ft/gone.ts), 57-76 ms in the recovery benchmark
 * (docs/launcher.md, "Chaos test and fault costs", 4 ranks, in-process rows). A member
 * nobody can tell is gone still costs the window (ElasticGroup's windowMs, 2 s default).
 */
export const WINDOW_SECONDS = 0.076;
/** A grow's round and transfer, measured at 2 nodes: 50-75 ms (docs/fault-tolerance.md, recovery ladder table). */
export const GROW_SECONDS = 0.075;
/** A retry's own cost besides the timeout and the step: 0.4-0.5 ms (docs/fault-tolerance.md). */
export const RETRY_SECONDS = 0.0005;
/**
 * In-memory restore over restore from disk: the recovery benchmark's restore phase for a
 * killed rank, 2013 ms from node-local snapshot files against 2406 ms from the durable
 * checkpoint (docs/launcher.md, "Chaos test and fault costs"; both mostly process start).
 * The in-memory path's larger gain is the work not recomputed, which the simulation
 * charges separately (the time since the last snapshot).
 */
export const IN_MEMORY_RESTORE_FRACTION = 2013 / 2406;
/** The recovery benchmark runs 2 nodes with --heartbeat-timeout 1 (bench/ft/recovery.ts). */
export const BENCH_NODES = 2;
export const BENCH_HEARTBEAT_TIMEOUT_SECONDS = 1;

/** Tree-shaped rounds and communicator bootstraps: rendezvous grows with log2 of the nodes. */
const logFactor = (nodes: number, from = BENCH_NODES) => Math.max(1, Math.log2(nodes)) / Math.log2(from);

/**
 * Defaults at the simulated scale:
 * - full restart: detectSeconds, then restartSeconds (relaunch and load from storage);
 * - in-memory: the same relaunch, restore IN_MEMORY_RESTORE_FRACTION of restartSeconds;
 * - restart in place / shrink: detectSeconds, then the membership round (WINDOW_SECONDS
 *   at 2 nodes, grown with log2 nodes); a spare (restart in place) then receives one
 *   node's share of the state over the network;
 * - grow (a repaired node rejoins a shrunk job): GROW_SECONDS grown with log2 nodes,
 *   plus the same transfer;
 * - retry: detectSeconds (the timeout that fired) plus RETRY_SECONDS.
 */
export function defaultRungCosts(detectSeconds: number, restartSeconds: number, s: Scale): RungCosts {
  const transfer = s.stateBytes / s.nodes / s.networkBandwidth;
  const window = WINDOW_SECONDS * logFactor(s.nodes);
  return {
    'retry': both({ detect: detectSeconds, abort: RETRY_SECONDS }),
    'restart-in-place': both({ detect: detectSeconds, rendezvous: window, restore: transfer }),
    'shrink': both({ detect: detectSeconds, rendezvous: window }),
    'grow': both({ rendezvous: GROW_SECONDS * logFactor(s.nodes), restore: transfer }),
    'in-memory': both({ detect: detectSeconds, restore: restartSeconds * IN_MEMORY_RESTORE_FRACTION }),
    'full-restart': both({ detect: detectSeconds, restore: restartSeconds }),
  };
}

/** Overlays given per-rung costs on the defaults. */
export function mergeRungCosts(base: RungCosts, given: z.output<typeof recoveryCostsSchema> | undefined): RungCosts {
  const out = structuredClone(base);
  for (const r of RUNGS) {
    const g = given?.[r];
    if (!g) continue;
    const sw = g.software ?? g.hardware!;
    const hw = g.hardware ?? g.software!;
    if (sw) out[r] = { software: { ...sw }, hardware: { ...hw } };
  }
  return out;
}

// ---- the recovery benchmark's JSON ----

const ms = z.number().nonnegative().nullable().optional();
const benchRowSchema = z.object({
  ranks: z.number().int().positive(),
  fault: z.string().min(1),
  restore: z.enum(['disk', 'memory', 'full', 'in-process']),
  trial: z.number().int().nonnegative(),
  /** false: nothing noticed the fault (a healed partition): no recovery to cost. */
  restart: z.boolean().default(true),
  totalMs: z.number().nonnegative().nullable(),
  phases: z.strictObject({ detect: ms, abort: ms, rendezvous: ms, restore: ms, firstStep: ms }),
});
export const benchFileSchema = z.object({
  /** The benchmark's step time (its first-step phase is one step plus warm-up). */
  stepMs: z.number().nonnegative().default(40),
  /** Nodes the benchmark ran on. */
  nodes: z.number().int().min(2).default(BENCH_NODES),
  heartbeatTimeoutSeconds: z.number().positive().default(BENCH_HEARTBEAT_TIMEOUT_SECONDS),
  rows: z.array(benchRowSchema).min(1),
});
export type BenchFile = z.input<typeof benchFileSchema>;
type BenchRow = z.output<typeof benchRowSchema>;

interface RungSource {
  /** Restore paths of the benchmark, the first one present used. */
  restores: readonly string[];
  /** Faults standing for each class, the first one present used. */
  faults: Record<FaultClass, readonly string[]>;
  /** Where none of those faults is present: the path's rows of any fault (else the rung keeps its default). */
  anyFault: boolean;
  /** Phases that are not an outage of this rung. */
  drop?: readonly Phase[];
  /** Whether the rung moves the state (a restore or a transfer to a new member). */
  movesState: boolean;
}

const GANG = { software: ['kill-rank'], hardware: ['kill-node'] } as const;
/**
 * In-process rows (bench/ft/recovery.ts --restore in-process): only the lost rank
 * restarts; abort is until the survivors train shrunk, rendezvous until the restarted
 * rank has rejoined with the state, restore none. A killed node or a partition takes
 * the gang's path there, so only rank faults stand for the in-process rungs; a spare
 * swapping in costs what the lost rank's return does.
 */
const IN_PROCESS = { software: ['kill-rank', 'hang'], hardware: ['kill-rank', 'hang'] } as const;

/** Which benchmark rows cost which rung: the launcher's restart from disk is the ladder's full restart (torchrun-style 'full' where no 'disk' rows are). */
export const RUNG_SOURCES: Partial<Record<Rung, RungSource>> = {
  'full-restart': { restores: ['disk', 'full'], faults: GANG, anyFault: true, movesState: true },
  'in-memory': { restores: ['memory'], faults: GANG, anyFault: true, movesState: true },
  'restart-in-place': { restores: ['in-process'], faults: IN_PROCESS, anyFault: false, movesState: true },
  // A shrunk job trains while the lost rank comes back: the rejoin is not its outage,
  // and the survivors hold the same step, so no state moves.
  'shrink': { restores: ['in-process'], faults: IN_PROCESS, anyFault: false, drop: ['rendezvous'], movesState: false },
};

/** The benchmark's own median (bench/ft/recovery.ts): the upper middle of an even count. */
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Median per phase over the trials (each phase on its own, as the benchmark's table), milliseconds. */
export function medianPhases(rows: readonly BenchRow[]): Phases {
  return phases(Object.fromEntries(PHASES.map((p) => {
    const xs = rows.map((r) => r.phases[p]).filter((v): v is number => typeof v === 'number');
    return [p, xs.length ? median(xs) : 0];
  })));
}

/** The rows one rung and class was costed from, and their medians (ms, before scaling; dropped phases 0). */
export interface Source { restore: string; fault: string; ranks: number; trials: number; medianMs: Phases }

export interface ScaledCosts {
  /** Seconds per phase at the simulated scale: simulate()'s recoveryCosts. */
  costs: Partial<Record<Rung, Record<FaultClass, Phases>>>;
  /** Per rung and class, the rows used. */
  sources: Partial<Record<Rung, Record<FaultClass, Source>>>;
}

/**
 * The scaling rule, from the benchmark's medians (ms, at `nodes` nodes) to the simulated job:
 * - detect × heartbeatTimeout / the benchmark's (silent faults are noticed by the timeout;
 *   a process exit, noticed in milliseconds, grows in proportion and stays small);
 * - abort as measured (every node stops its own ranks in parallel);
 * - rendezvous × log2(nodes) / log2(benchmark nodes);
 * - restore as measured (process start, init; the benchmark's checkpoint is a few KB)
 *   plus one node's share of the state over the path's bandwidth: storage (shared by
 *   all nodes) for disk and full, network for memory and restart in place (none for a
 *   shrink: the survivors hold the same step);
 * - first step less one benchmark step (the warm-up beyond a step; the step itself is
 *   training time in the simulation).
 * Rows at the largest rank count are used; rows with restart false are skipped; which
 * rows cost which rung is RUNG_SOURCES.
 */
export function scaleBenchCosts(file: BenchFile, s: Scale): ScaledCosts {
  const f = parseInput('recovery costs', benchFileSchema, file);
  const rows = f.rows.filter((r) => r.restart);
  const ranks = Math.max(...rows.map((r) => r.ranks));
  const costs: ScaledCosts['costs'] = {};
  const sources: ScaledCosts['sources'] = {};
  for (const rung of RUNGS) {
    const src = RUNG_SOURCES[rung];
    const restore = src?.restores.find((p) => rows.some((r) => r.restore === p && r.ranks === ranks));
    if (!src || !restore) continue;
    const path = rows.filter((r) => r.restore === restore && r.ranks === ranks);
    const bw = restore === 'disk' || restore === 'full' ? s.storageBandwidth / s.nodes : s.networkBandwidth;
    const byClass = {} as Record<FaultClass, Phases>;
    const from = {} as Record<FaultClass, Source>;
    for (const cls of ['software', 'hardware'] as const) {
      const fault = src.faults[cls].find((x) => path.some((r) => r.fault === x));
      const use = fault ? path.filter((r) => r.fault === fault) : src.anyFault ? path : [];
      if (!use.length) break;
      const m = medianPhases(use);
      for (const p of src.drop ?? []) m[p] = 0;
      byClass[cls] = {
        detect: (m.detect / 1000) * (s.heartbeatTimeoutSeconds / f.heartbeatTimeoutSeconds),
        abort: m.abort / 1000,
        rendezvous: (m.rendezvous / 1000) * logFactor(s.nodes, f.nodes),
        restore: m.restore / 1000 + (src.movesState ? s.stateBytes / s.nodes / bw : 0),
        firstStep: Math.max(0, m.firstStep - f.stepMs) / 1000,
      };
      from[cls] = { restore, fault: fault ?? 'any', ranks, trials: use.length, medianMs: m };
    }
    if (!byClass.software || !byClass.hardware) continue;
    costs[rung] = byClass;
    sources[rung] = from;
  }
  return { costs, sources };
}

/** Reads and validates a recovery benchmark's JSON (`bench/ft/recovery.ts --json FILE`), then scales it. */
export function readRecoveryCosts(file: string, s: Scale): ScaledCosts {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `recovery costs: expected a readable JSON file (bench/ft/recovery.ts --json), got ${(err as Error).message}`, { file });
  }
  return scaleBenchCosts(raw as BenchFile, s);
}
