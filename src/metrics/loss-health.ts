/**
 * Loss health: per step, after the gradients are reduced and before the optimizer
 * step, decide whether to apply the step. Three detectors: a non-finite loss or
 * gradient, a loss spike (z-score over a window, loss-detectors.ts), divergence (the
 * loss above k x its running minimum, or rising over a window). Each has an action:
 *
 *   skip      the optimizer step is not taken; the batch's data range is recorded
 *   rollback  the newest checkpoint before the offending data is loaded and that
 *             data range is skipped when the loop comes back to it
 *   scale-lr  the learning rate is multiplied by lrFactor (the step is still taken,
 *             unless the gradients are not finite: a NaN step is never applied)
 *   stop      training ends with a LossHealthError
 *
 * The decision is collective: each rank proposes from the global loss (identical on
 * every rank) and its own gradients (FSDP shards, or a corruption only one rank
 * saw), the proposals are exchanged, and every rank takes the most severe one, so
 * ranks stay in lockstep. Events go to the TrainMetrics log and registry.
 */
import { rm } from 'node:fs/promises';
import { Counter, type Registry } from 'prom-client';
import type { Logger } from 'pino';
import { loadTraining } from '../checkpoint/runtime.js';
import { uncommit } from '../checkpoint/commit.js';
import { committed } from '../checkpoint/layout.js';
import { readManifest } from '../checkpoint/manifest.js';
import type { Communicator } from '../comm/communicator.js';
import { NcclNodeError } from '../errors.js';
import { AdamW, SGD, type Optimizer } from '../runtime/optim.js';
import { DivergenceDetector, LossHistory, SpikeDetector, type DivergenceOptions, type SpikeOptions } from './loss-detectors.js';

export type HealthAction = 'skip' | 'rollback' | 'scale-lr' | 'stop';
export type HealthKind = 'nonfinite' | 'spike' | 'divergence';

export interface LossHealthOptions {
  /** A NaN or Inf loss, or gradient on any rank (always checked); default action 'skip'. */
  nonfinite?: { action?: HealthAction };
  /** false turns the spike detector off; default action 'skip'. */
  spike?: (SpikeOptions & { action?: HealthAction }) | false;
  /** false turns the divergence detector off; default action 'stop' ('rollback' needs checkpoints). */
  divergence?: (DivergenceOptions & { action?: HealthAction }) | false;
  /** 'scale-lr' multiplies the learning rate by this (default 0.5). */
  lrFactor?: number;
  /** A rollback skips the data of the offending step and of this many steps before it (default 0). */
  rollbackSkip?: number;
  /** After this many rollbacks a further one stops training instead (default 3). */
  maxRollbacks?: number;
  /** Where events are logged and counted (a TrainMetrics has both). */
  metrics?: { logger: Logger | null; prom: { registry: Registry } };
}

export interface HealthEvent {
  step: number;
  kind: HealthKind;
  action: HealthAction;
  /** The global loss of the step (NaN/Infinity as such). */
  loss: number;
  /** spike: z-score; divergence: loss over the running minimum; nonfinite: NaN. */
  score: number;
  /** Ranks whose gradients held a NaN or Inf after the reduction. */
  ranks: number[];
  /** The data the action concerns: steps [from, to], and their global sample indices [first, end). */
  data: { from: number; to: number; samples: [number, number] };
  /** The learning rate after a scale-lr. */
  lr?: number;
}

/** What the loop does with the step. */
export type Verdict = 'apply' | 'skip' | 'rollback';

/** Training ended by loss health ('stop', or more rollbacks than maxRollbacks). */
export class LossHealthError extends NcclNodeError {
  constructor(readonly event: HealthEvent, why: string) {
    super('ERR_UNAVAILABLE', `loss health stopped training at step ${event.step}: ${why}`, { lossHealth: event });
  }
}

/** What check() needs of the step; the loop fills it. */
export interface HealthCheck {
  step: number;
  /** The step's global loss (the same bits on every rank). */
  loss: number;
  /** Σ g² over the gradients this rank holds after the reduction (non-finite iff one is). */
  gradSumSquares: () => Promise<number>;
  comm: { rank: number; allGatherObject<T>(v: T): Promise<T[]> };
  optimizer: Optimizer;
  /** Sequences per step over all ranks (for sample indices). */
  globalBatch: number;
}

const SEVERITY: Record<HealthAction | 'none', number> = { none: 0, 'scale-lr': 1, skip: 2, rollback: 3, stop: 4 };
const ACTIONS = new Set<HealthAction>(['skip', 'rollback', 'scale-lr', 'stop']);

interface Proposal {
  kind: HealthKind | null;
  action: HealthAction | 'none';
  score: string;
  grad: boolean;
}

export class LossHealth {
  readonly events: HealthEvent[] = [];
  readonly history = new LossHistory();
  readonly spike: SpikeDetector | null;
  readonly divergence: DivergenceDetector | null;
  readonly actions: Record<HealthKind, HealthAction>;
  readonly lrFactor: number;
  readonly rollbackSkip: number;
  readonly maxRollbacks: number;
  rollbacks = 0;
  /** Step ranges [from, to] whose data a rollback dropped. */
  readonly dropped: Array<[number, number]> = [];
  /** The event of the last rollback verdict (the loop performs it). */
  pendingRollback: HealthEvent | null = null;
  readonly #o: LossHealthOptions;
  readonly #counter: Counter | null;

  constructor(o: LossHealthOptions = {}) {
    this.#o = o;
    this.spike = o.spike === false ? null : new SpikeDetector(o.spike ?? {});
    this.divergence = o.divergence === false ? null : new DivergenceDetector(o.divergence ?? {});
    this.actions = {
      nonfinite: action(o.nonfinite?.action ?? 'skip', 'nonfinite'),
      spike: action((o.spike || undefined)?.action ?? 'skip', 'spike'),
      divergence: action((o.divergence || undefined)?.action ?? 'stop', 'divergence'),
    };
    this.lrFactor = o.lrFactor ?? 0.5;
    if (!(this.lrFactor > 0)) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `loss health: lrFactor must be > 0, received ${o.lrFactor}`);
    this.rollbackSkip = o.rollbackSkip ?? 0;
    this.maxRollbacks = o.maxRollbacks ?? 3;
    for (const [k, v] of [['rollbackSkip', this.rollbackSkip], ['maxRollbacks', this.maxRollbacks]] as const) {
      if (!Number.isInteger(v) || v < 0) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `loss health: ${k} must be a non-negative integer, received ${v}`);
    }
    const registry = o.metrics?.prom.registry;
    this.#counter = registry
      ? (registry.getSingleMetric('nccl_node_loss_health_events_total') as Counter | undefined) ??
        new Counter({ name: 'nccl_node_loss_health_events_total', help: 'Loss health events, by detector (kind) and action taken.', labelNames: ['kind', 'action'], registers: [registry] })
      : null;
  }

  /** Whether any detector may ask for a rollback (the loop then needs checkpoints). */
  get mayRollback(): boolean {
    return Object.entries(this.actions).some(([k, a]) => a === 'rollback' && (k === 'nonfinite' || (k === 'spike' ? this.spike : this.divergence)));
  }

  /** Whether a rollback dropped the data of `step`: the loop reads it and trains on nothing. */
  isDropped(step: number): boolean {
    return this.dropped.some(([a, b]) => step >= a && step <= b);
  }

  /** Collective: every rank calls it once per trained step, in step order. */
  async check(c: HealthCheck): Promise<Verdict> {
    const gradBad = !Number.isFinite(await c.gradSumSquares());
    const mine = this.#propose(c.loss, gradBad);
    const all = await c.comm.allGatherObject<Proposal>(mine);
    // The most severe proposal wins; ties go to the lowest rank, so every rank picks the same one.
    let pick = all[0]!;
    for (const p of all) if (SEVERITY[p.action] > SEVERITY[pick.action]) pick = p;
    const nonfinite = !Number.isFinite(c.loss) || all.some((p) => p.grad);
    if (pick.action === 'none' || pick.kind === null) {
      this.history.accept(c.step, c.loss);
      return 'apply';
    }
    let act = pick.action;
    if (act === 'rollback' && this.rollbacks >= this.maxRollbacks) act = 'stop';
    const from = act === 'rollback' ? Math.max(0, c.step - this.rollbackSkip) : c.step;
    const e: HealthEvent = {
      step: c.step, kind: pick.kind, action: act, loss: c.loss, score: Number(pick.score),
      ranks: all.flatMap((p, r) => (p.grad ? [r] : [])),
      data: { from, to: c.step, samples: [from * c.globalBatch, (c.step + 1) * c.globalBatch] },
    };
    if (act === 'scale-lr') e.lr = scaleLearningRate(c.optimizer, this.lrFactor);
    this.#record(e);
    if (act === 'stop') {
      throw new LossHealthError(e, pick.action === 'rollback' ? `${pick.kind}, and ${this.maxRollbacks} rollbacks already` : `${pick.kind} (score ${pick.score})`);
    }
    if (act === 'rollback') {
      this.rollbacks++;
      this.dropped.push([from, c.step]);
      this.pendingRollback = e;
      return 'rollback';
    }
    // A non-finite step is never applied, whatever the action; scale-lr applies the rest.
    return act === 'skip' || nonfinite ? 'skip' : 'apply';
  }

  /** After the loop restored the checkpoint of step `step`: forget the losses of the steps undone. */
  rolledBack(step: number, dir: string): void {
    this.history.truncate(step);
    const e = this.pendingRollback;
    this.pendingRollback = null;
    this.#o.metrics?.logger?.warn({ event: 'loss_health_rollback', step, dir, skip_from: e?.data.from ?? null, skip_to: e?.data.to ?? null }, 'loss health rollback');
  }

  #propose(loss: number, gradBad: boolean): Proposal {
    if (!Number.isFinite(loss) || gradBad) return { kind: 'nonfinite', action: this.actions.nonfinite, score: 'NaN', grad: gradBad };
    const s = this.spike?.assess(loss, this.history);
    if (s?.fires) return { kind: 'spike', action: this.actions.spike, score: String(s.score), grad: false };
    const d = this.divergence?.assess(loss, this.history);
    if (d?.fires) return { kind: 'divergence', action: this.actions.divergence, score: String(d.score), grad: false };
    return { kind: null, action: 'none', score: 'NaN', grad: false };
  }

  #record(e: HealthEvent): void {
    this.events.push(e);
    this.#counter?.inc({ kind: e.kind, action: e.action });
    this.#o.metrics?.logger?.warn({
      event: 'loss_health', step: e.step, kind: e.kind, action: e.action, loss: String(e.loss), score: Number.isFinite(e.score) ? e.score : null,
      ranks: e.ranks, data_from: e.data.from, data_to: e.data.to, samples: e.data.samples, lr: e.lr ?? null,
    }, 'loss health');
  }
}

/**
 * Collective: loads into `dp` the newest committed checkpoint under `root` that was
 * saved at or before step `before` (it holds no training on data from `before` on).
 * Rank 0 picks it and removes the newer ones (they trained on the dropped data, and
 * a later resume would pick them); every rank loads the one rank 0 broadcast.
 */
export async function restoreBefore(comm: Pick<Communicator, 'rank' | 'broadcastObject'>, root: string, before: number,
  dp: Parameters<typeof loadTraining>[1]): Promise<{ dir: string; step: number; data: unknown }> {
  let found = '';
  if (comm.rank === 0) {
    const newer: string[] = [];
    for (const e of await committed(root)) {
      if (e.step > before) {
        newer.push(e.dir);
        continue;
      }
      if (await readManifest(e.dir).then(() => true, () => false)) {
        found = e.dir;
        break;
      }
    }
    if (found) for (const dir of newer) await uncommit(dir).then(() => rm(dir, { recursive: true, force: true }));
  }
  const dir = await comm.broadcastObject(found, { root: 0 });
  if (!dir) throw new NcclNodeError('ERR_UNAVAILABLE', `loss health rollback: no committed checkpoint at or before step ${before} in ${root}`, { root, before });
  const r = await loadTraining(dir, dp);
  return { dir, step: r.step, data: r.train.data };
}

/** The reduced gradients this rank holds: DDP's buckets or FSDP's gradient shards (host arrays or DeviceBuffers). */
export function reducedGradients(dp: object): unknown[] {
  if ('buckets' in dp) return (dp as { buckets: { flat: unknown }[] }).buckets.map((b) => b.flat);
  if ('units' in dp) return (dp as { units: { gradShard: unknown }[] }).units.map((u) => u.gradShard);
  throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'loss health: expected a DDP or FSDP runtime (buckets or units)');
}

/** Multiplies the learning rate of nccl-node's AdamW or SGD (read at every step, host and device) and returns the new one. */
export function scaleLearningRate(optimizer: Optimizer, factor: number): number {
  if (!(optimizer instanceof AdamW || optimizer instanceof SGD)) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `loss health scale-lr: expected nccl-node's AdamW or SGD, received ${optimizer.constructor.name}`);
  }
  optimizer.o.lr *= factor;
  return optimizer.o.lr;
}

function action(a: string, what: string): HealthAction {
  if (!ACTIONS.has(a as HealthAction)) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `loss health: ${what}.action must be skip, rollback, scale-lr or stop, received ${a}`);
  return a as HealthAction;
}
