/**
 * Calibration benchmark: calibrate() this machine, predict the DDP step time of the
 * example models at 1, 2 and 4 ranks (src/plan/predict.ts), then train each for a few
 * steps at each size and compare: predicted, measured (median step time of rank 0,
 * warm-up steps dropped), error % = (predicted − measured) / measured.
 *
 *   node --import tsx bench/plan/calibration.ts [--models tiny-lm,gpt] [--ranks 1,2,4]
 *        [--steps 8] [--warmup 3] [--global-batch 8] [--out bench/plan/calibration.json]
 *
 * Runs every configuration one after another; on a shared machine run it alone.
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { GPT_TEST_CONFIG, type GPTConfig } from '../../src/models/gpt/gpt.js';
import { TEST_CONFIG } from '../../src/models/tiny-lm/tiny-lm.js';
import { calibrate } from '../../src/plan/calibrate.js';
import { predict, type ExampleModel } from '../../src/plan/predict.js';
import { runRanks } from '../../test/helpers/ranks.js';
import { median } from '../stats.js';

const { values: a } = parseArgs({
  options: {
    models: { type: 'string', default: 'tiny-lm,gpt' },
    ranks: { type: 'string', default: '1,2,4' },
    steps: { type: 'string', default: '8' },
    warmup: { type: 'string', default: '3' },
    'global-batch': { type: 'string', default: '8' },
    'calibrate-ms': { type: 'string', default: '400' },
    out: { type: 'string', default: 'bench/plan/calibration.json' },
  },
});
const steps = Number(a.steps), warmup = Number(a.warmup), batch = Number(a['global-batch']);
// GPT large enough that its matmuls, not its per-call overheads, set the step time.
const GPT_BENCH: GPTConfig = { ...GPT_TEST_CONFIG, dim: 128, hidden: 512, heads: 4, layers: 2, seqLen: 16, vocab: 257 };
const MODELS: Record<string, ExampleModel> = { 'tiny-lm': { kind: 'tiny-lm', config: TEST_CONFIG }, gpt: { kind: 'gpt', config: GPT_BENCH } };
const models = a.models!.split(',').map((m) => {
  const model = MODELS[m];
  if (!model) throw new Error(`--models: expected names from ${Object.keys(MODELS).join(', ')}, got ${m}`);
  return [m, model] as const;
});
const rankList = a.ranks!.split(',').map(Number);

// The matmul shape the first model runs most: one rank's rows through its first MLP layer.
const first = models[0]![1].config;
const profile = await calibrate({
  ms: Number(a['calibrate-ms']),
  matmul: { rows: batch * first.seqLen, inDim: first.dim, outDim: first.hidden },
  attention: { T: GPT_BENCH.seqLen, dim: GPT_BENCH.dim, heads: GPT_BENCH.heads },
});
const c = profile.calibration;
console.log(`calibration: matmul ${(c.matmul.flopsPerSecond / 1e9).toFixed(2)} GFLOP/s, attention ${(c.attention.flopsPerSecond / 1e9).toFixed(2)} GFLOP/s, ` +
  `copy ${(c.memoryBandwidth / 1e9).toFixed(1)} GB/s, all-reduce α ${(c.allReduce.latencySeconds * 1e6).toFixed(0)} µs B ${(c.allReduce.busBandwidth / 1e9).toFixed(3)} GB/s, ` +
  `disk ${(c.disk.bandwidth / 1e6).toFixed(0)} MB/s, ${c.cores} cores`);

const worker = fileURLToPath(new URL('./train-worker.ts', import.meta.url));
const rows = [];
for (const [name, model] of models) {
  for (const n of rankList) {
    const p = predict(profile, { model, ranks: n, globalBatch: batch });
    const out = await runRanks<{ rank: number; stepMs: number[] }>(worker, n, {
      payload: { kind: model.kind, config: model.config, steps: warmup + steps, globalBatch: batch }, check: true, timeoutMs: 590_000,
    });
    const measured = median(out[0]!.result!.stepMs.slice(warmup)) / 1000;
    const row = {
      model: name, ranks: n, params: p.params,
      predictedMs: +(p.stepSeconds * 1000).toFixed(2), measuredMs: +(measured * 1000).toFixed(2),
      errorPct: +((100 * (p.stepSeconds - measured)) / measured).toFixed(1),
      computeMs: +(p.computeSeconds * 1000).toFixed(2), optimizerMs: +(p.optimizerSeconds * 1000).toFixed(2),
      exposedAllReduceMs: +(p.exposedAllReduceSeconds * 1000).toFixed(2), checkpointMs: +(p.checkpoint.seconds * 1000).toFixed(2),
    };
    rows.push(row);
    console.log(`${name} x${n}: predicted ${row.predictedMs} ms, measured ${row.measuredMs} ms, error ${row.errorPct} %`);
  }
}
console.table(rows);
const meanAbs = rows.reduce((s, r) => s + Math.abs(r.errorPct), 0) / rows.length;
console.log(`mean |error| ${meanAbs.toFixed(1)} %`);
writeFileSync(a.out!, `${JSON.stringify({
  bench: 'plan-calibration', date: new Date().toISOString(), globalBatch: batch, steps, warmup,
  models: Object.fromEntries(models.map(([n, m]) => [n, m.config])), meanAbsErrorPct: +meanAbs.toFixed(1), rows, profile,
}, null, 2)}\n`);
console.log(`wrote ${a.out}`);
