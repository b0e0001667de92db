/**
 * simulate(): a seeded discrete-event simulation of a synchronous training run that
 * checkpoints every `checkpointIntervalSeconds` of work and recovers from each failure
 * along a recovery path (./recovery-policy.ts): restart from the last durable
 * checkpoint, restore a peer's in-memory snapshot, or recover in-process (retry,
 * restart in place with a spare, shrink), each rung costed per phase (./ladder-costs.ts).
 * Failures of each kind arrive as a Poisson process (exponential inter-arrival times)
 * at that kind's per-GPU rate times the GPU count, on a uniformly drawn node; by
 * default the rates are Llama 3's interruption counts over 54 days on 16,384 GPUs
 * (./reliability.ts). The failure trace depends only on the seed, not on the
 * checkpoint schedule or the path, so a sweep compares them on the same failures.
 */
import { z } from 'zod';
import { NcclNodeError } from '../errors.js';
import { mulberry32 } from '../util/prng.js';
import { defaultRungCosts, mergeRungCosts, recoveryCostsSchema, RUNGS, total, type Rung, type RungCosts, type Scale } from './ladder-costs.js';
import { chooseRung, RECOVERY_PATHS, SnapshotInterval, type RecoveryPath } from './recovery-policy.js';
import { LLAMA3_FAULTS, LLAMA3_GPUS, LLAMA3_HOURS, dalyInterval, youngInterval } from './reliability.js';
import { parseInput } from './schema.js';

const pos = z.number().positive();
const nonneg = z.number().nonnegative();

const faultSchema = z.strictObject({
  name: z.string().min(1),
  /** Failures per GPU-hour. */
  ratePerGpuHour: pos,
  hardware: z.boolean().default(false),
  planned: z.boolean().default(false),
  /** A transient fault (a timeout on a communicator still usable): the in-process path retries the step. */
  transient: z.boolean().default(false),
  /** Per-kind overrides: detection on every rung, restart (all but detection) of a full restart. */
  detectSeconds: nonneg.optional(),
  restartSeconds: nonneg.optional(),
});

const DEFAULT_FAULTS = LLAMA3_FAULTS.map((f) => ({
  name: f.name, ratePerGpuHour: f.count / (LLAMA3_GPUS * LLAMA3_HOURS), hardware: f.hardware, planned: f.planned ?? false, transient: false,
}));

export const simulateSchema = z.strictObject({
  gpus: z.number().int().positive().default(LLAMA3_GPUS),
  /** Wall-clock length of the simulated run. */
  hours: pos.default(LLAMA3_HOURS),
  faults: z.array(faultSchema).min(1).default(DEFAULT_FAULTS),
  /** Multiplies every fault rate (what-if: a less or more reliable fleet). */
  rateScale: pos.default(1),
  /** Work between checkpoints; defaults to Young's sqrt(2·C·MTBF). */
  checkpointIntervalSeconds: pos.optional(),
  /** Time training stalls per checkpoint (C). */
  checkpointSeconds: nonneg.default(30),
  /** From failure to the job noticing it (watchdog, health checks). */
  detectSeconds: nonneg.default(60),
  /** Relaunch and load the last checkpoint. */
  restartSeconds: nonneg.default(300),
  /** Extra wait to drain and replace a node after a hardware fault when no hot spare is free. */
  replaceSeconds: nonneg.default(1800),
  /** Idle nodes that take a failed node's place at once. */
  hotSpares: z.number().int().nonnegative().default(0),
  /** A used spare comes back (the failed node repaired) after this long. */
  spareRepairHours: pos.default(24),
  /** How the job recovers; each path falls back to the next rung when its condition fails. */
  recoveryPath: z.enum(RECOVERY_PATHS).default('full-restart'),
  /** Per-rung phase costs in seconds at this scale (readRecoveryCosts scales a benchmark's); others keep the defaults. */
  recoveryCosts: recoveryCostsSchema.optional(),
  /**
   * One training step: what in-process recovery loses (the step in flight). Default:
   * Llama 3 405B, 6 · 405e9 params · 16M tokens per step / (16,384 GPUs · 400 TFLOP/s
   * achieved) ≈ 5.9 s (Dubey et al. 2024, sections 3.3.2 and 3.4.1).
   */
  stepSeconds: pos.default(6),
  /** In-memory snapshots (the in-memory and in-process paths) every this many steps, replicated to a ring peer node. */
  snapshotEverySteps: z.number().int().positive().default(1),
  /** Training stall per in-memory snapshot (0: the copy overlaps training, as Gemini's, SOSP 2023). */
  snapshotSeconds: nonneg.default(0),
  gpusPerNode: z.number().int().positive().default(8),
  /** Nodes the job may be short of and keep training (shrunk, at (nodes - k) / nodes speed) until they come back. */
  shrinkSlackNodes: z.number().int().nonnegative().default(0),
  /** Training state bytes in all: a spare or a grown-back node receives one node's share over the network. */
  stateBytes: nonneg.default(0),
  /** Per-node network bandwidth, bytes/s; default one 400 Gb/s NIC. */
  networkBandwidth: pos.default(50e9),
  /** Aggregate checkpoint read bandwidth, bytes/s: scaling a benchmark's restore from disk (needed with stateBytes). */
  storageBandwidth: pos.optional(),
  /** Timeout that detects a silent fault at this scale: scaling a benchmark's detection (default detectSeconds). */
  heartbeatTimeoutSeconds: pos.optional(),
  /** Tokens per second while training, for goodput; optional. */
  tokensPerSecond: pos.optional(),
  seed: z.number().int().nonnegative().default(1),
});
export type SimulateInput = z.input<typeof simulateSchema>;
type SimOptions = z.output<typeof simulateSchema>;

export interface SimulateResult {
  seed: number;
  intervalSeconds: number;
  wallSeconds: number;
  /** Work that counts: committed checkpoints plus the work in flight at the end. */
  usefulSeconds: number;
  /** Effective training time ratio: usefulSeconds / wallSeconds. */
  ettr: number;
  /** Tokens per second averaged over the wall time (null without tokensPerSecond). */
  goodputTokensPerSecond: number | null;
  gpuHoursLost: number;
  /** Wall seconds: durable checkpoint stalls, work recomputed, recovery outages, node replacement waits, in-memory snapshot stalls, throughput missing while shrunk. */
  lost: { checkpointing: number; rework: number; detectAndRestart: number; replacement: number; snapshots: number; shrunk: number };
  interruptions: number;
  byKind: Record<string, number>;
  recoveryPath: RecoveryPath;
  /** Failures per rung taken (a failure during an outage joins the outage's rung; grow: a shrunk job's node back). */
  byRung: Record<Rung, number>;
  /** Outage seconds per rung. */
  recoverySecondsByRung: Record<Rung, number>;
  /** The costs used, seconds per rung: total of the phases per fault class. */
  rungSeconds: Record<Rung, { software: number; hardware: number }>;
}

interface Failure { at: number; kind: number; node: number }

/** Work-losing failure rate of the fleet, per second. */
function unplannedRate(o: SimOptions): number {
  return o.faults.filter((f) => !f.planned).reduce((s, f) => s + f.ratePerGpuHour, 0) * o.rateScale * o.gpus / 3600;
}

/** Young's interval for these options (sqrt(2·C·M), M = 1 / unplanned fleet rate). */
export function youngIntervalFor(input: SimulateInput): number {
  const o = parseInput('simulate', simulateSchema, input);
  return youngInterval(o.checkpointSeconds, 1 / unplannedRate(o));
}

/** Nodes of the job (a partial node counts as one). */
const nodesOf = (o: SimOptions) => Math.ceil(o.gpus / o.gpusPerNode);

const scaleFrom = (o: SimOptions): Scale => ({
  nodes: nodesOf(o), heartbeatTimeoutSeconds: o.heartbeatTimeoutSeconds ?? o.detectSeconds, stateBytes: o.stateBytes,
  storageBandwidth: o.storageBandwidth ?? Infinity, networkBandwidth: o.networkBandwidth, stepSeconds: o.stepSeconds,
});

/** The sizes ladder-costs' scaling rule needs, from simulate()'s input. */
export function scaleOf(input: SimulateInput): Scale {
  const o = parseInput('simulate', simulateSchema, input);
  if (o.stateBytes > 0 && o.storageBandwidth === undefined) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'simulate: storageBandwidth: expected the storage bandwidth with stateBytes (a restore from disk reads the state), got none');
  }
  return scaleFrom(o);
}

/** Every failure up to the horizon, per kind from its own exponential clock, in time order, each on a node. */
function failureTrace(o: SimOptions, horizon: number): Failure[] {
  const rng = mulberry32(o.seed);
  const out: Failure[] = [];
  o.faults.forEach((f, kind) => {
    const rate = (f.ratePerGpuHour * o.rateScale * o.gpus) / 3600;
    // Inverse-CDF draw of an exponential inter-arrival time.
    for (let t = -Math.log(1 - rng()) / rate; t < horizon; t += -Math.log(1 - rng()) / rate) out.push({ at: t, kind, node: 0 });
  });
  out.sort((a, b) => a.at - b.at);
  // Nodes from their own stream, so the times stay those of the same seed without nodes.
  const nodeRng = mulberry32((o.seed ^ 0x5bd1e995) >>> 0);
  const nodes = nodesOf(o);
  for (const f of out) f.node = Math.floor(nodeRng() * nodes);
  return out;
}

/** Per-rung costs for these options: the defaults with `recoveryCosts` laid over them. */
function rungCostsFor(o: SimOptions): RungCosts {
  return mergeRungCosts(defaultRungCosts(o.detectSeconds, o.restartSeconds, scaleFrom(o)), o.recoveryCosts);
}

export function simulate(input: SimulateInput): SimulateResult {
  const o = parseInput('simulate', simulateSchema, input);
  const H = o.hours * 3600;
  const tau = o.checkpointIntervalSeconds ?? youngInterval(o.checkpointSeconds, 1 / unplannedRate(o));
  const C = o.checkpointSeconds;
  // Each interval is one loop turn: bound the work (and reject a zero interval, which
  // would never advance the clock).
  if (!(tau > 0) || H / tau > 1e7) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `simulate: expected a checkpoint interval above ${H / 1e7} s (hours·3600/1e7), got ${tau}; give checkpointIntervalSeconds when checkpointSeconds is 0`);
  }
  const costs = rungCostsFor(o);
  const nodes = nodesOf(o);
  const step = o.stepSeconds;
  const snapshots = o.recoveryPath !== 'full-restart';
  const I = new SnapshotInterval(tau, snapshots ? o.snapshotEverySteps * step : Infinity, snapshots ? o.snapshotSeconds : 0);
  const trace = failureTrace(o, H);
  type Kind = SimOptions['faults'][number];
  // Outage of a rung for a fault kind: its detection, then the rest (a kind's own times override).
  const restOf = (rung: Rung, k: Kind): number => {
    const p = costs[rung][k.hardware ? 'hardware' : 'software'];
    return rung === 'full-restart' && k.restartSeconds !== undefined ? k.restartSeconds : total(p) - p.detect;
  };
  const cost = (rung: Rung, k: Kind): number => (k.detectSeconds ?? costs[rung][k.hardware ? 'hardware' : 'software'].detect) + restOf(rung, k);
  const spares: number[] = new Array(o.hotSpares).fill(0); // time each spare is free again
  const takeSpare = (at: number): boolean => {
    const i = spares.findIndex((free) => free <= at);
    if (i >= 0) spares[i] = at + o.spareRepairHours * 3600;
    return i >= 0;
  };
  const shrunkUntil: number[] = []; // when each node the job runs without comes back
  const failedAt = new Float64Array(nodes).fill(-Infinity); // last hardware failure per node
  const lost = { checkpointing: 0, rework: 0, detectAndRestart: 0, replacement: 0, snapshots: 0, shrunk: 0 };
  const byKind: Record<string, number> = {};
  const zero = () => Object.fromEntries(RUNGS.map((r) => [r, 0])) as Record<Rung, number>;
  const byRung = zero();
  const secondsByRung = zero();
  let t = 0; // wall clock: the job is up and training (or checkpointing) from t
  let committed = 0; // work saved in durable checkpoints
  let pending = 0; // work since the last durable checkpoint
  let offset = 0; // wall offset inside the interval (SnapshotInterval) the job resumes at
  let snapWall = 0; // when the newest snapshot (or durable checkpoint) was taken
  let next = 0;
  while (t < H) {
    const f = trace[next];
    const failAt = f ? f.at : Infinity;
    // Train (with snapshot stalls) to the end of the interval, then checkpoint; both interruptible.
    const segEnd = t + (I.end - offset);
    const ckptEnd = segEnd + C;
    const advance = (until: number) => {
      const y = offset + Math.max(0, Math.min(segEnd, until) - t);
      const p = I.pos(y);
      if (I.m > 0) lost.snapshots += y - offset - (p.x - pending);
      if (p.done > I.pos(offset).done) snapWall = t + p.done * (I.s + I.m) - offset;
      pending = p.x;
      return p;
    };
    if (Math.min(ckptEnd, H) <= failAt) {
      if (ckptEnd > H) { advance(H); lost.checkpointing += Math.max(0, H - segEnd); break; }
      if (I.m > 0) lost.snapshots += I.end - offset - (tau - pending);
      committed += tau; pending = 0; offset = 0; lost.checkpointing += C; t = ckptEnd; snapWall = ckptEnd;
      continue;
    }
    next++;
    const kind = o.faults[f!.kind]!;
    byKind[kind.name] = (byKind[kind.name] ?? 0) + 1;
    const p = advance(failAt);
    if (failAt > segEnd) lost.checkpointing += failAt - segEnd;
    let down: number;
    let rung: Rung | null = null;
    if (kind.planned) {
      // Maintenance is announced: checkpoint, stop, restart; nothing is recomputed.
      committed += pending; pending = 0; offset = 0; lost.checkpointing += C; snapWall = failAt + C;
      const restart = restOf('full-restart', kind);
      down = C + restart; lost.detectAndRestart += restart;
    } else {
      const peer = (f!.node + 1) % nodes;
      const choice = chooseRung({
        path: o.recoveryPath, hardware: kind.hardware, transient: kind.transient,
        spareFree: spares.some((free) => free <= failAt), slack: shrunkUntil.filter((u) => u > failAt).length < o.shrinkSlackNodes,
        ownCopy: failedAt[f!.node]! < snapWall, peerCopy: nodes > 1 && failedAt[peer]! < snapWall,
      });
      rung = choice.rung;
      if (choice.spare) takeSpare(failAt);
      let keep: number; // work kept: the last step boundary, the snapshot, or none
      if (rung === 'full-restart') { keep = 0; offset = 0; }
      else if (rung === 'in-memory') { keep = p.done * I.s; offset = p.done * (I.s + I.m); }
      else if (failAt > segEnd) { keep = pending; offset = I.end; } // the steps are done; the checkpoint runs again
      else {
        // The step in flight is lost; completed snapshots all sit at or below its start.
        keep = Math.max(Math.floor(pending / step + 1e-9) * step, p.done * I.s);
        offset = keep + I.m * Math.min(p.done, I.count);
      }
      lost.rework += pending - keep; pending = keep;
      let outage = cost(rung, kind);
      if (rung === 'shrink') {
        // Training goes on a node short until the node is replaced, then grows back (its stall charged now).
        const back = failAt + o.replaceSeconds;
        shrunkUntil.push(back);
        lost.shrunk += (Math.min(back, H) - failAt) / nodes;
        outage += cost('grow', kind); byRung.grow++;
      }
      let wait = 0;
      if (kind.hardware) {
        failedAt[f!.node] = failAt;
        // A restart at full size needs a node in the lost one's place: a free spare, else the replacement wait.
        if ((rung === 'in-memory' || rung === 'full-restart') && !takeSpare(failAt)) wait = o.replaceSeconds;
      }
      lost.detectAndRestart += outage; lost.replacement += wait;
      down = outage + wait;
      byRung[rung]++;
    }
    t = failAt + down;
    // Failures while the job is down: an unplanned one restarts the recovery from its
    // own time (the new node or software fault must be handled too); maintenance waits.
    while (next < trace.length && trace[next]!.at < t) {
      const g = trace[next++]!;
      const k = o.faults[g.kind]!;
      if (k.planned) continue;
      byKind[k.name] = (byKind[k.name] ?? 0) + 1;
      if (rung) byRung[rung]++;
      let c = cost(rung ?? 'full-restart', k);
      if (k.hardware) {
        failedAt[g.node] = g.at;
        if (!takeSpare(g.at)) c += o.replaceSeconds;
      }
      const end = g.at + c;
      if (end > t) { lost.detectAndRestart += end - t; t = end; }
    }
    if (rung) secondsByRung[rung] += Math.min(t, H) - failAt;
  }
  const useful = committed + pending - lost.shrunk;
  const ettr = Math.min(1, useful / H);
  const interruptions = Object.values(byKind).reduce((s, n) => s + n, 0);
  return {
    seed: o.seed, intervalSeconds: tau, wallSeconds: H, usefulSeconds: useful, ettr,
    goodputTokensPerSecond: o.tokensPerSecond === undefined ? null : o.tokensPerSecond * ettr,
    gpuHoursLost: ((H - useful) * o.gpus) / 3600, lost, interruptions, byKind,
    recoveryPath: o.recoveryPath, byRung, recoverySecondsByRung: secondsByRung,
    rungSeconds: Object.fromEntries(RUNGS.map((r) => [r, { software: total(costs[r].software), hardware: total(costs[r].hardware) }])) as SimulateResult['rungSeconds'],
  };
}

export { dalyInterval, youngInterval };
