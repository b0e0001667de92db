/**
 * simulate(): a seeded discrete-event simulation of a synchronous training run that
 * checkpoints every `checkpointIntervalSeconds` of work and restarts from the last
 * checkpoint after each failure. Failures of each kind arrive as a Poisson process
 * (exponential inter-arrival times) at that kind's per-GPU rate times the GPU count;
 * by default the rates are Llama 3's interruption counts over 54 days on 16,384 GPUs
 * (./reliability.ts). The failure trace depends only on the seed, not on the
 * checkpoint schedule, so a sweep compares intervals on the same failures.
 */
import { z } from 'zod';
import { NcclNodeError } from '../errors.js';
import { mulberry32 } from '../util/prng.js';
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
  /** Per-kind overrides of the run-wide detection and restart times. */
  detectSeconds: nonneg.optional(),
  restartSeconds: nonneg.optional(),
});

const DEFAULT_FAULTS = LLAMA3_FAULTS.map((f) => ({
  name: f.name, ratePerGpuHour: f.count / (LLAMA3_GPUS * LLAMA3_HOURS), hardware: f.hardware, planned: f.planned ?? false,
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
  lost: { checkpointing: number; rework: number; detectAndRestart: number; replacement: number };
  interruptions: number;
  byKind: Record<string, number>;
}

interface Failure { at: number; kind: number }

/** Work-losing failure rate of the fleet, per second. */
function unplannedRate(o: SimOptions): number {
  return o.faults.filter((f) => !f.planned).reduce((s, f) => s + f.ratePerGpuHour, 0) * o.rateScale * o.gpus / 3600;
}

/** Young's interval for these options (sqrt(2·C·M), M = 1 / unplanned fleet rate). */
export function youngIntervalFor(input: SimulateInput): number {
  const o = parseInput('simulate', simulateSchema, input);
  return youngInterval(o.checkpointSeconds, 1 / unplannedRate(o));
}

/** Every failure up to the horizon, per kind from its own exponential clock, in time order. */
function failureTrace(o: SimOptions, horizon: number): Failure[] {
  const rng = mulberry32(o.seed);
  const out: Failure[] = [];
  o.faults.forEach((f, kind) => {
    const rate = (f.ratePerGpuHour * o.rateScale * o.gpus) / 3600;
    // Inverse-CDF draw of an exponential inter-arrival time.
    for (let t = -Math.log(1 - rng()) / rate; t < horizon; t += -Math.log(1 - rng()) / rate) out.push({ at: t, kind });
  });
  return out.sort((a, b) => a.at - b.at);
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
  const trace = failureTrace(o, H);
  const recovery = (k: SimOptions['faults'][number]) => (k.detectSeconds ?? o.detectSeconds) + (k.restartSeconds ?? o.restartSeconds);
  const spares: number[] = new Array(o.hotSpares).fill(0); // time each spare is free again
  const lost = { checkpointing: 0, rework: 0, detectAndRestart: 0, replacement: 0 };
  const byKind: Record<string, number> = {};
  let t = 0; // wall clock: the job is up and training (or checkpointing) from t
  let committed = 0; // work saved in checkpoints
  let pending = 0; // work since the last checkpoint
  let next = 0;
  while (t < H) {
    const f = trace[next];
    const failAt = f ? f.at : Infinity;
    // Train to the end of the interval, then checkpoint; both interruptible.
    const segEnd = t + (tau - pending);
    const ckptEnd = segEnd + C;
    if (Math.min(ckptEnd, H) <= failAt) {
      if (ckptEnd > H) { pending += Math.max(0, Math.min(segEnd, H) - t); lost.checkpointing += Math.max(0, H - segEnd); break; }
      committed += tau; pending = 0; lost.checkpointing += C; t = ckptEnd;
      continue;
    }
    next++;
    const kind = o.faults[f!.kind]!;
    byKind[kind.name] = (byKind[kind.name] ?? 0) + 1;
    // Progress made up to the failure.
    pending += Math.max(0, Math.min(segEnd, failAt) - t);
    if (failAt > segEnd) lost.checkpointing += failAt - segEnd;
    let down: number;
    if (kind.planned) {
      // Maintenance is announced: checkpoint, stop, restart; nothing is recomputed.
      committed += pending; pending = 0; lost.checkpointing += C;
      const restart = kind.restartSeconds ?? o.restartSeconds;
      down = C + restart; lost.detectAndRestart += restart;
    } else {
      lost.rework += pending; pending = 0;
      down = recovery(kind); lost.detectAndRestart += down;
      if (kind.hardware) {
        const i = spares.findIndex((free) => free <= failAt);
        if (i >= 0) spares[i] = failAt + o.spareRepairHours * 3600;
        else { down += o.replaceSeconds; lost.replacement += o.replaceSeconds; }
      }
    }
    t = failAt + down;
    // Failures while the job is down: an unplanned one restarts the recovery from its
    // own time (the new node or software fault must be handled too); maintenance waits.
    while (next < trace.length && trace[next]!.at < t) {
      const g = trace[next++]!;
      const k = o.faults[g.kind]!;
      if (k.planned) continue;
      byKind[k.name] = (byKind[k.name] ?? 0) + 1;
      let cost = recovery(k);
      if (k.hardware) {
        const i = spares.findIndex((free) => free <= g.at);
        if (i >= 0) spares[i] = g.at + o.spareRepairHours * 3600; else cost += o.replaceSeconds;
      }
      const end = g.at + cost;
      if (end > t) { lost.detectAndRestart += end - t; t = end; }
    }
  }
  const useful = committed + pending;
  const ettr = Math.min(1, useful / H);
  const interruptions = Object.values(byKind).reduce((s, n) => s + n, 0);
  return {
    seed: o.seed, intervalSeconds: tau, wallSeconds: H, usefulSeconds: useful, ettr,
    goodputTokensPerSecond: o.tokensPerSecond === undefined ? null : o.tokensPerSecond * ettr,
    gpuHoursLost: ((H - useful) * o.gpus) / 3600, lost, interruptions, byKind,
  };
}

export { dalyInterval, youngInterval };
