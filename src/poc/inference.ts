/**
 * Inference and canary stages: the finetuned checkpoint (candidate) served by the
 * HTTP server under open-loop load, then the pretrained one (baseline) under the
 * same load (same seed: same arrival times, same prompts in the same order).
 *
 * inference gates: end-to-end latency p95 and p99 within the SLO, enough completed
 * samples, exact-match accuracy. canary gates: the candidate's time to first token
 * is not worse than the baseline's (one-sided Mann-Whitney) and its accuracy is not
 * worse (one-sided two-proportion test), both at alpha = 0.05; the verdict is
 * "promote" when both hold, else "roll back". The canary ranks time to first token,
 * not end-to-end latency: on the same prompts that is the same work for both models,
 * while end-to-end latency grows with the answer's length, which the two models
 * choose differently (a model that answers loses to one that stops at once).
 */
import { NcclNodeError } from '../errors.js';
import type { ModelConfig } from '../models/language-model.js';
import { DEFAULT_MIN_ACCURACY } from './finetune.js';
import { runLoad, summarize, type LoadSummary, type RequestRecord } from './loadgen.js';
import { gate, type Plot } from './report.js';
import { startServer } from './serve.js';
import type { StageResult } from './stage.js';
import { canary } from './stats.js';
import type { Problem } from './tasks.js';

export interface InferenceOptions {
  /** Checkpoint dirs: finetuned, pretrained. */
  candidate: string;
  baseline: string;
  model: ModelConfig;
  /** vocab.json written by CompactVocab.write. */
  vocabPath: string;
  /** Held-out problems. */
  problems: Problem[];
  workers: number;
  /** Requests per second offered (open loop). */
  rate: number;
  requests: number;
  minSamples: number;
  slo: { p95Ms: number; p99Ms: number };
  maxTokens?: number;
  /** Gate on the served exact-match accuracy (default: the finetune stage's DEFAULT_MIN_ACCURACY). */
  minAccuracy?: number;
  /** Arrival times and prompt order (default 1). */
  seed?: number;
  log?: (line: string) => void;
}

const ALPHA = 0.05;
/** Requests per worker sent before measuring, so V8 has compiled the decode loop in every worker. */
const WARMUP_PER_WORKER = 4;

interface Served { records: RequestRecord[]; summary: LoadSummary }

async function serveAndLoad(checkpoint: string, o: InferenceOptions, seed: number): Promise<Served> {
  const server = await startServer({ checkpoint, model: o.model, vocabPath: o.vocabPath, workers: o.workers, log: o.log });
  try {
    const url = server.url;
    await runLoad({ url, problems: o.problems, rate: 1000, requests: WARMUP_PER_WORKER * o.workers, seed: seed + 1, maxTokens: o.maxTokens });
    const records = await runLoad({ url, problems: o.problems, rate: o.rate, requests: o.requests, seed, maxTokens: o.maxTokens });
    const summary = summarize(records, { rate: o.rate, sloMs: o.slo.p95Ms, seed });
    const ms = (v: number | undefined) => (v === undefined ? '-' : v.toFixed(1));
    o.log?.(`${checkpoint}: ${summary.completed}/${summary.requests} completed, e2e p50 ${ms(summary.e2eMs?.p50.estimate)} p95 ${ms(summary.e2eMs?.p95.estimate)} p99 ${ms(summary.e2eMs?.p99.estimate)} ms, accuracy ${summary.accuracy.toFixed(3)}`);
    return { records, summary };
  } finally {
    await server.close();
  }
}

export async function inferenceStage(o: InferenceOptions): Promise<[StageResult, StageResult]> {
  const t0 = performance.now();
  for (const [k, v] of [['workers', o.workers], ['requests', o.requests], ['minSamples', o.minSamples]] as const) {
    if (!Number.isInteger(v) || v < 1) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `inference: ${k} must be a positive integer, received ${v}`);
  }
  if (!(o.rate > 0 && Number.isFinite(o.rate))) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `inference: rate must be a positive number of requests/s, received ${o.rate}`);
  if (o.problems.length === 0) throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'inference: no problems to ask');
  const seed = o.seed ?? 1;
  const cand = await serveAndLoad(o.candidate, o, seed);
  const t1 = performance.now();
  const base = await serveAndLoad(o.baseline, o, seed);
  const t2 = performance.now();
  const s = cand.summary;
  const minAccuracy = o.minAccuracy ?? DEFAULT_MIN_ACCURACY;

  const inference: StageResult = {
    stage: 'inference', seconds: (t1 - t0) / 1000,
    gates: [
      gate({ stage: 'inference', name: 'end-to-end latency p95', measured: s.e2eMs?.p95.estimate ?? null, threshold: o.slo.p95Ms, kind: 'max', unit: 'ms', note: ci(s.e2eMs?.p95) }),
      gate({ stage: 'inference', name: 'end-to-end latency p99', measured: s.e2eMs?.p99.estimate ?? null, threshold: o.slo.p99Ms, kind: 'max', unit: 'ms', note: ci(s.e2eMs?.p99) }),
      gate({ stage: 'inference', name: 'completed samples', measured: s.completed, threshold: o.minSamples, kind: 'min', unit: 'requests', note: `${s.failed} failed of ${s.requests}` }),
      gate({ stage: 'inference', name: 'served exact-match accuracy', measured: s.accuracy, threshold: minAccuracy, kind: 'min', unit: 'fraction', note: `${s.correct}/${s.requests}` }),
    ],
    metrics: {
      checkpoint: o.candidate, workers: o.workers, rate: o.rate, slo: o.slo, ...s,
      perRequest: cand.records.map((r) => ({ ttftMs: r.ttftMs, tpotMs: r.tpotMs, e2eMs: r.e2eMs, correct: r.correct, error: r.error })),
    },
    plots: [histogram(cand, base), percentiles(cand, base)],
  };

  const c = compare(cand, base);
  const canaryResult: StageResult = {
    stage: 'canary', seconds: (t2 - t1) / 1000,
    gates: [
      gate({ stage: 'canary', name: 'time to first token not worse than baseline (Mann-Whitney p)', measured: c.latencyP, threshold: ALPHA, kind: 'min', unit: 'p-value',
        note: `TTFT p50 ${fmt(s.ttftMs?.p50.estimate)} vs ${fmt(base.summary.ttftMs?.p50.estimate)} ms (e2e p50 ${fmt(s.e2eMs?.p50.estimate)} vs ${fmt(base.summary.e2eMs?.p50.estimate)} ms)` }),
      gate({ stage: 'canary', name: 'accuracy not worse than baseline (two-proportion p)', measured: c.accuracyP, threshold: ALPHA, kind: 'min', unit: 'p-value',
        note: `${s.correct}/${s.requests} vs ${base.summary.correct}/${base.summary.requests}` }),
    ],
    metrics: {
      verdict: c.pass ? 'promote' : 'roll back', reasons: c.reasons, latencyP: c.latencyP, accuracyP: c.accuracyP, alpha: ALPHA,
      candidate: { checkpoint: o.candidate, accuracy: s.accuracy, ttftMs: s.ttftMs, e2eMs: s.e2eMs, completed: s.completed },
      baseline: { checkpoint: o.baseline, ...base.summary },
    },
    plots: [],
  };
  return [inference, canaryResult];
}

const latencies = (x: Served) => x.records.filter((r) => r.e2eMs !== null && !r.error).map((r) => r.e2eMs!);
const firstToken = (x: Served) => x.records.filter((r) => r.ttftMs !== null && !r.error).map((r) => r.ttftMs!);

/** stats.canary(), except that a side without a completed request cannot be ranked: a candidate with none fails, a baseline with none does not hold it back. */
function compare(cand: Served, base: Served): ReturnType<typeof canary> {
  const [lc, lb] = [firstToken(cand), firstToken(base)];
  const sides = {
    candidate: { latencies: lc.length ? lc : [0], correct: cand.summary.correct, total: cand.summary.requests },
    baseline: { latencies: lb.length ? lb : [0], correct: base.summary.correct, total: base.summary.requests },
  };
  const c = canary({ ...sides, alpha: ALPHA });
  if (lc.length && lb.length) return c;
  const latencyP = lc.length ? 1 : 0;
  const reasons = c.reasons.filter((r) => !r.startsWith('latency'));
  if (!lc.length) reasons.unshift('no candidate request completed');
  return { ...c, latencyP, pass: reasons.length === 0, reasons };
}
const fmt = (v: number | undefined) => (v === undefined ? '-' : v.toFixed(1));
const ci = (i: { low: number; high: number; confidence: number } | undefined) => (i ? `${Math.round(i.confidence * 100)}% CI ${i.low.toFixed(1)}..${i.high.toFixed(1)} ms` : 'no samples');

function histogram(cand: Served, base: Served): Plot {
  return {
    id: 'inference-latency-histogram', title: 'End-to-end latency (ms), candidate and baseline',
    spec: {
      mark: 'bar',
      encoding: {
        x: { field: 'e2eMs', type: 'quantitative', bin: { maxbins: 30 }, title: 'end-to-end latency (ms)' },
        y: { aggregate: 'count', type: 'quantitative', stack: null },
        color: { field: 'model', type: 'nominal' },
        opacity: { value: 0.6 },
      },
    },
    rows: [...latencies(cand).map((e2eMs) => ({ model: 'candidate', e2eMs })), ...latencies(base).map((e2eMs) => ({ model: 'baseline', e2eMs }))],
  };
}

function percentiles(cand: Served, base: Served): Plot {
  const rows: Record<string, unknown>[] = [];
  for (const [model, x] of [['candidate', cand], ['baseline', base]] as const) {
    for (const metric of ['ttftMs', 'tpotMs', 'e2eMs'] as const) {
      const l = x.summary[metric];
      if (!l) continue;
      for (const p of ['p50', 'p95', 'p99'] as const) rows.push({ model, metric, percentile: p, ms: l[p].estimate, low: l[p].low, high: l[p].high });
    }
  }
  return {
    id: 'inference-percentiles', title: 'Latency percentiles with 95% bootstrap intervals (ms)',
    spec: {
      facet: { column: { field: 'metric', type: 'nominal', title: null } },
      resolve: { scale: { y: 'independent' } },
      spec: {
        encoding: { x: { field: 'percentile', type: 'nominal', title: null }, xOffset: { field: 'model' }, color: { field: 'model', type: 'nominal' } },
        layer: [
          { mark: { type: 'point', filled: true }, encoding: { y: { field: 'ms', type: 'quantitative', title: 'ms' } } },
          { mark: 'rule', encoding: { y: { field: 'low', type: 'quantitative' }, y2: { field: 'high' } } },
        ],
      },
    },
    rows,
  };
}
