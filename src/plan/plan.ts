/**
 * plan(): analytic capacity planning for one training run: memory per GPU, the
 * smallest cluster that holds the state, communication per axis, step time, total
 * FLOPs, time to train, checkpoint size and the failure-driven checkpoint interval.
 * Formulas and their sources are in ./estimate.ts, ./reliability.ts and docs/plan.md.
 */
import { NcclNodeError } from '../errors.js';
import { GPUS, type GpuSpec, type GpuType } from './hardware.js';
import { estimate, STATE_BYTES, type Estimate, type Shape } from './estimate.js';
import { dalyInterval, firstOrderEttr, youngInterval } from './reliability.js';
import { parseInput, planSchema, type Layout, type PlanInput, type PlanOptions } from './schema.js';

export interface PlanResult {
  gpu: GpuSpec;
  params: number;
  /** How params was obtained. */
  paramsSource: 'given' | '12*L*h^2 + V*h';
  /** Weights + gradients + optimizer state of the whole model, bytes. */
  stateBytes: number;
  /** GPUs whose HBM together just holds that state (no activations, perfect sharding). */
  minGpusForState: number;
  /** C = 6·N·D. */
  totalFlops: number;
  /** The chosen layout's estimate (the best of the search when no layout was given). */
  best: Estimate;
  /** Other layouts the search kept, fastest first (empty with a fixed layout). */
  alternatives: Estimate[];
  tokensPerSecond: number;
  tokensPerDay: number;
  /** Days to train `tokens` without failures. */
  days: number;
  checkpoint: { bytes: number; writeSeconds: number; costSeconds: number };
  reliability: {
    fleetMtbfSeconds: number; failuresPerDay: number;
    youngIntervalSeconds: number; dalyIntervalSeconds: number;
    /** First-order ETTR at Young's interval, and days to train divided by it. */
    expectedEttr: number; daysWithFailures: number;
  };
}

function resolveShape(o: PlanOptions): { shape: Shape; source: PlanResult['paramsSource'] } {
  const m = o.model;
  if (m.params !== undefined) return { shape: { ...m, params: m.params }, source: 'given' };
  // 12·L·h² (attention 4h² + MLP 8h² per layer) + V·h (embedding), Kaplan et al. 2020,
  // section 2.1; drops biases, layer norms and position embeddings (Narayanan et al.
  // 2021, section 5.1 give the exact 12·L·h²·(1 + 13/(12h) + (V+s)/(12·L·h))).
  const params = 12 * m.layers! * m.hidden! ** 2 + m.vocab! * m.hidden!;
  return { shape: { ...m, params }, source: '12*L*h^2 + V*h' };
}

const powersOfTwo = (max: number): number[] => {
  const out: number[] = [];
  for (let x = 1; x <= max; x *= 2) out.push(x);
  return out;
};

/** Layouts dp·tp·pp = count with tp in the NVLink domain dividing heads, pp dividing layers. */
function candidates(o: PlanOptions, shape: Shape, count: number, domain: number): Layout[] {
  const out: Layout[] = [];
  for (const tp of powersOfTwo(Math.min(domain, shape.heads!))) {
    if (shape.heads! % tp !== 0 || count % tp !== 0) continue;
    for (const pp of powersOfTwo(shape.layers!)) {
      if (shape.layers! % pp !== 0 || count % (tp * pp) !== 0) continue;
      const dp = count / (tp * pp);
      const microBatches = Math.max(1, Math.ceil(o.globalBatchTokens / (shape.seq! * dp)));
      out.push({ dp, tp, pp, microBatches, microBatchSize: 1, schedule: '1f1b', virtualStages: 1 });
    }
  }
  return out;
}

export function plan(input: PlanInput): PlanResult {
  const o = parseInput('plan', planSchema, input);
  const gpu: GpuSpec = o.cluster.spec ?? GPUS[o.cluster.gpu as GpuType];
  const count = o.cluster.count;
  const domain = o.cluster.nvlinkDomain ?? gpu.nvlinkDomain;
  const { shape, source } = resolveShape(o);
  const N = shape.params;
  const b = STATE_BYTES[o.precision];
  const stateBytes = N * (b.weights + b.grads + b.optimizer);

  let best: Estimate;
  let alternatives: Estimate[] = [];
  if (o.layout) {
    const l = o.layout;
    if (l.dp * l.tp * l.pp !== count) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `plan: layout: expected dp·tp·pp = cluster.count (${count}), got ${l.dp}·${l.tp}·${l.pp} = ${l.dp * l.tp * l.pp}`);
    }
    if (o.mfu === undefined && !shape.seq) throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'plan: expected mfu, or model.seq to compute the step time');
    best = estimate(o, shape, l, gpu, domain, count);
  } else if (shape.layers && shape.hidden && shape.heads && shape.seq) {
    const fits = candidates(o, shape, count, domain).map((l) => estimate(o, shape, l, gpu, domain, count)).filter((e) => e.memory.fits);
    if (fits.length === 0) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `plan: no layout of ${count} ${gpu.name} fits the model in ${gpu.hbmBytes / 1e9} GB per GPU; expected more GPUs, a higher ZeRO stage or recomputation`);
    }
    // Fastest by tokens/s (global batches differ slightly after rounding m up).
    const rate = (e: Estimate) => e.tokensPerStep! / e.stepSeconds!;
    fits.sort((x, y) => rate(y) - rate(x));
    [best] = fits as [Estimate];
    alternatives = fits.slice(1, 5);
  } else {
    if (o.mfu === undefined) throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'plan: expected mfu, or a layout and model.seq, or the full model shape to search layouts');
    // Shape unknown: plain data parallelism over every GPU (state memory only).
    best = estimate(o, shape, { dp: count, tp: 1, pp: 1, microBatches: 1, microBatchSize: 1, schedule: '1f1b', virtualStages: 1 }, gpu, domain, count);
  }

  // Throughput: N·6 FLOPs per token at the achieved MFU of the whole cluster.
  const mfu = best.mfu ?? o.mfu!;
  const tokensPerSecond = (count * gpu.peakBf16Flops * mfu) / (6 * N);
  const tokensPerDay = tokensPerSecond * 86400;
  const days = o.tokens / tokensPerDay;

  // A checkpoint holds weights and optimizer state (gradients are recomputed).
  const ckptBytes = N * (b.weights + b.optimizer);
  const writeSeconds = ckptBytes / o.storageBandwidth;
  const costSeconds = o.checkpointSeconds ?? writeSeconds;
  // Independent exponential components: the fleet's failure rate is the sum of rates.
  const perHour = o.reliability.components
    ? o.reliability.components.reduce((s, c) => s + c.count / c.mtbfHours, 0)
    : count / o.reliability.gpuMtbfHours;
  const fleetMtbfSeconds = 3600 / perHour;
  const young = youngInterval(costSeconds, fleetMtbfSeconds);
  const expectedEttr = firstOrderEttr(young, costSeconds, fleetMtbfSeconds, o.restartSeconds);
  return {
    gpu, params: N, paramsSource: source, stateBytes,
    minGpusForState: Math.ceil(stateBytes / gpu.hbmBytes),
    totalFlops: 6 * N * o.tokens,
    best, alternatives, tokensPerSecond, tokensPerDay, days,
    checkpoint: { bytes: ckptBytes, writeSeconds, costSeconds },
    reliability: {
      fleetMtbfSeconds, failuresPerDay: perHour * 24,
      youngIntervalSeconds: young, dalyIntervalSeconds: dalyInterval(costSeconds, fleetMtbfSeconds),
      expectedEttr, daysWithFailures: expectedEttr > 0 ? days / expectedEttr : Infinity,
    },
  };
}
