/**
 * One rank of a metrics run: train() on the tiny model with TrainMetrics fed by the
 * loop, a data source that can sleep per rank (a slow input pipeline), optional
 * checkpoints, endpoint and logs. With waitScrape it keeps serving until a scrape
 * has come after the last step, so Prometheus holds the final values. Reports the
 * samples, the loop's own numbers, the endpoint text and the registry's JSON.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { init } from '../../src/comm/init.js';
import { globalBatch, rowsOf } from '../../src/models/tiny-lm/synthetic-corpus.js';
import { collectiveTotals, measureCpuPeak, summarize, formatSummary, StragglerMonitor, TrainMetrics } from '../../src/metrics/index.js';
import { MODELS, train } from '../../src/train/loop.js';
import { readPayload, writeResult } from '../helpers/ranks.js';

interface Payload {
  steps: number;
  globalBatch: number;
  parallel?: 'ddp' | 'fsdp';
  /** Per-rank sleep in the data source, ms. */
  delayMs?: Record<string, number>;
  port?: number;
  logDir?: string;
  ckptDir?: string;
  ckptEvery?: number;
  waitScrape?: boolean;
  /** Score stragglers (StragglerMonitor). */
  stragglers?: boolean;
}

const p = readPayload<Payload>();
const comm = await init({ backend: 'gloo' });
const model = MODELS.tiny!;
const metrics = await TrainMetrics.create({
  rank: comm.rank, localRank: comm.localRank, worldSize: comm.size, model, peak: measureCpuPeak(),
  ...(p.port !== undefined ? { port: p.port } : {}), ...(p.logDir ? { logDir: p.logDir } : {}),
  ...(p.stragglers ? { stragglers: await StragglerMonitor.create(comm) } : {}),
});
// An outside clock on the step boundaries: from the first begin() to the last end().
let first = NaN, last = NaN;
const begin = metrics.begin.bind(metrics), end = metrics.end.bind(metrics);
metrics.begin = (s) => { if (Number.isNaN(first)) first = performance.now(); begin(s); };
metrics.end = (r) => { end(r); last = performance.now(); };

const delay = p.delayMs?.[String(comm.rank)] ?? 0;
const T = model.seqLen;
const r = await train(comm, {
  model, steps: p.steps, globalBatch: p.globalBatch, microBatches: 1,
  parallel: p.parallel === 'fsdp' ? { kind: 'fsdp', stage: 3 } : { kind: 'ddp' },
  optimizer: { kind: 'adamw', lr: 1e-3, weightDecay: 0.01 }, clipNorm: 1, dataSeed: 3,
  data: {
    async rows(step, rank, rows) {
      if (delay) await sleep(delay);
      return rowsOf(globalBatch(step, p.globalBatch, T, model.vocab, 3), T, rank * rows, rows);
    },
  },
  ...(p.ckptDir ? { ckpt: { dir: p.ckptDir, every: p.ckptEvery ?? 4, overlap: true } } : {}),
  metrics,
});
if (p.waitScrape) {
  const seen = metrics.scrapes;
  const deadline = Date.now() + 15_000;
  while (metrics.scrapes <= seen && Date.now() < deadline) await sleep(100);
}
await metrics.settle(); // every checkpoint recorded: nothing changes the registry from here
const summary = await summarize(metrics, comm, p.logDir);
const text = metrics.url ? await (await fetch(metrics.url)).text() : null;
const json = await metrics.prom.registry.getMetricsAsJSON();
await metrics.close();
writeResult({
  samples: metrics.samples, checkpoints: metrics.checkpoints, span: (last - first) / 1000, losses: r.losses, stepMs: r.stepMs,
  numParams: r.params.reduce((a, x) => a + x.length, 0), collectives: collectiveTotals(), flopsPerToken: metrics.flopsPerToken,
  peak: metrics.options.peak, json, text, summary, table: summary ? formatSummary(summary) : null,
});
await comm.destroy();
