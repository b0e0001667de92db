/**
 * One rank of a run with four faults at once: train() on the tiny model (DDP) with
 * TrainMetrics + StragglerMonitor, LossHealth, the SDC sentinel and a FaultInjector.
 * `slow.rank`'s data source sleeps `slow.ms` every step; the injector puts a NaN into
 * `nan.rank`'s all-reduce result at `nan.step` and flips one low mantissa bit of a
 * parameter on `flip.rank` after `flip.step`. After training every rank but `stall`
 * makes one more all-reduce, which times out and dumps the flight records into
 * $NCCL_NODE_TRACE_DIR; each rank waits until all ranks' records are there.
 */
import { existsSync, readdirSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { init } from '../../src/comm/init.js';
import { globalBatch, rowsOf } from '../../src/models/tiny-lm/synthetic-corpus.js';
import { TinyLM } from '../../src/models/tiny-lm/tiny-lm.js';
import { StragglerMonitor, summarize, TrainMetrics } from '../../src/metrics/index.js';
import { LossHealth } from '../../src/metrics/loss-health.js';
import { SdcSentinel } from '../../src/metrics/sdc.js';
import { FaultInjector } from '../../src/metrics/sdc-inject.js';
import { MODELS, train } from '../../src/train/loop.js';
import { readPayload, writeResult } from '../helpers/ranks.js';

interface Payload {
  steps: number;
  globalBatch: number;
  slow: { rank: number; ms: number };
  nan: { rank: number; step: number };
  flip: { rank: number; step: number; index: number; bit: number };
  stall: number;
  timeoutMs: number;
}

const p = readPayload<Payload>();
const dir = process.env.NCCL_NODE_TRACE_DIR!;
const world = await init({ backend: 'gloo' });
const model = MODELS.tiny!;
const T = model.seqLen;
const injector = new FaultInjector(world.rank, [
  { site: 'collective', rank: p.nan.rank, step: p.nan.step, index: 17, value: NaN },
  { site: 'parameter', rank: p.flip.rank, step: p.flip.step, index: p.flip.index, bit: p.flip.bit },
], new TinyLM(model).params);
// The monitor reads the world communicator's flight record; train() runs on the injector's wrapper of it.
const stragglers = await StragglerMonitor.create(world, { minLatenessSeconds: 0.05, window: 16 });
const metrics = await TrainMetrics.create({ rank: world.rank, worldSize: world.size, model, peak: null, stragglers });
const sentinel = new SdcSentinel({ every: 1, metrics });
const health = new LossHealth({ spike: false, divergence: false, metrics });
const r = await train(injector.wrap(world), {
  model, steps: p.steps, globalBatch: p.globalBatch, microBatches: 1, parallel: { kind: 'ddp' },
  optimizer: { kind: 'adamw', lr: 3e-2, weightDecay: 0.01 }, dataSeed: 3,
  data: {
    async rows(step, rank, rows) {
      if (rank === p.slow.rank) await sleep(p.slow.ms);
      return rowsOf(globalBatch(step, p.globalBatch, T, model.vocab, 3), T, rank * rows, rows);
    },
  },
  health, probes: [injector, sentinel], metrics,
});
const summary = await summarize(metrics, world);
const prom = await metrics.prom.registry.metrics();

// The hang: every rank but `stall` makes one more all-reduce.
let error: string | null = null;
if (world.rank !== p.stall) {
  try {
    await world.allReduce(new Float32Array(4), { timeoutMs: p.timeoutMs });
  } catch (err) {
    error = (err as { code?: string }).code ?? String(err);
  }
}
// Ranks with a finished dump: a dump is written to <name>.tmp and renamed, so a .tmp (of a
// first dump, or of a later one replacing it) must not count.
const allDumped = (): boolean => existsSync(dir)
  && new Set(readdirSync(dir).flatMap((f) => /^nccl-node-trace-rank(\d+)-\d+\.json$/.exec(f)?.[1] ?? [])).size >= world.size;
const deadline = Date.now() + 15_000;
while (!allDumped() && Date.now() < deadline) await sleep(50);
writeResult({
  rank: world.rank, steps: r.losses.length, error, allDumped: allDumped(),
  samples: metrics.samples.map((s) => ({ step: s.step, seconds: s.seconds, loss: String(s.loss) })),
  health: health.events.map((e) => ({ step: e.step, kind: e.kind, action: e.action, ranks: e.ranks })),
  sdc: { events: sentinel.events, suspects: sentinel.suspects, checks: sentinel.checks },
  fired: injector.fired.map((f) => ({ site: f.site, step: f.step, tensor: f.tensor, before: String(f.before), after: String(f.after) })),
  verdict: stragglers.verdict, stragglerError: stragglers.error?.message ?? null,
  summary, prom,
});
// Peers may still read the store: leave together, rank 0 (the store's host) last.
await sleep(world.rank === 0 ? 600 : 100);
process.exit(0);
