/**
 * One rank of a straggler run: train() on the tiny model with TrainMetrics and a
 * StragglerMonitor. The data source sleeps `chronic.ms` every step on `chronic.rank`
 * (a slow input pipeline) and `oneOff.ms` once, at `oneOff.step`, on `oneOff.rank`.
 * Reports the verdict after every step, the summary and this rank's straggler gauges.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { init } from '../../src/comm/init.js';
import { globalBatch, rowsOf } from '../../src/models/tiny-lm/synthetic-corpus.js';
import { formatSummary, StragglerMonitor, summarize, TrainMetrics, type StragglerOptions } from '../../src/metrics/index.js';
import { MODELS, train } from '../../src/train/loop.js';
import { readPayload, writeResult } from '../helpers/ranks.js';

interface Payload {
  steps: number;
  globalBatch: number;
  chronic: { rank: number; ms: number };
  oneOff: { rank: number; step: number; ms: number };
  options: StragglerOptions;
}

const p = readPayload<Payload>();
const comm = await init({ backend: 'gloo' });
const model = MODELS.tiny!;
const stragglers = await StragglerMonitor.create(comm, p.options);
const metrics = await TrainMetrics.create({ rank: comm.rank, worldSize: comm.size, model, peak: null, stragglers });
const T = model.seqLen;
await train(comm, {
  model, steps: p.steps, globalBatch: p.globalBatch, microBatches: 1, parallel: { kind: 'ddp' },
  optimizer: { kind: 'adamw', lr: 1e-3, weightDecay: 0.01 }, dataSeed: 3,
  data: {
    async rows(step, rank, rows) {
      const ms = (rank === p.chronic.rank ? p.chronic.ms : 0) + (rank === p.oneOff.rank && step === p.oneOff.step ? p.oneOff.ms : 0);
      if (ms) await sleep(ms);
      return rowsOf(globalBatch(step, p.globalBatch, T, model.vocab, 3), T, rank * rows, rows);
    },
  },
  metrics,
});
const summary = await summarize(metrics, comm);
const gauges = (await metrics.prom.registry.getMetricsAsJSON()).filter((m) => m.name.startsWith('nccl_node_straggler'));
writeResult({ history: stragglers.history, verdict: stragglers.verdict, error: stragglers.error?.message ?? null, gauges, summary, table: summary ? formatSummary(summary) : null });
await metrics.close();
await comm.destroy();
