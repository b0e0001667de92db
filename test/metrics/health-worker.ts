/**
 * One rank of a loss-health / SDC run: train() on the tiny model over the synthetic
 * corpus, with optional loss health, SDC sentinel and injected faults. The data of
 * step s is batch `order[s]` of the corpus (default s), so a reference run can leave
 * batches out; `spike` rewrites the tokens of some batches (a token permutation the
 * model has not learnt, so the loss jumps). Writes the events and every rank's final
 * parameters (the result's `params`, rank 0's also as the float32 blob).
 */
import { init } from '../../src/comm/init.js';
import { globalBatch, rowsOf } from '../../src/models/tiny-lm/synthetic-corpus.js';
import { TinyLM } from '../../src/models/tiny-lm/tiny-lm.js';
import { LossHealth, LossHealthError, type LossHealthOptions } from '../../src/metrics/loss-health.js';
import { SdcSentinel, type SdcOptions } from '../../src/metrics/sdc.js';
import { FaultInjector, type Fault } from '../../src/metrics/sdc-inject.js';
import type { StepProbe } from '../../src/metrics/probe.js';
import { TrainMetrics } from '../../src/metrics/collector.js';
import { MODELS, train } from '../../src/train/loop.js';
import { readPayload, report, writeResult } from '../helpers/ranks.js';

interface Payload {
  steps: number;
  lr?: number;
  globalBatch?: number;
  parallel?: 'ddp' | 'fsdp';
  stage?: 1 | 2 | 3;
  order?: number[];
  spike?: number[];
  health?: LossHealthOptions;
  sdc?: SdcOptions;
  faults?: Fault[];
  ckpt?: { dir: string; at: number[] };
  /** TrainMetrics JSON lines here; health and sentinel log to it. */
  logDir?: string;
  /** The GPU runtime over NCCL (the stand-ins in tests). */
  device?: boolean;
}

const p = readPayload<Payload>();
const world = await init({ backend: p.device ? 'nccl' : 'gloo' });
if (p.device && world.backend !== 'nccl') throw new Error(`expected the NCCL backend, got ${world.backend}`);
const model = MODELS.tiny!;
const T = model.seqLen, G = p.globalBatch ?? 8;
// JSON has no NaN: a fault's value may come as a string.
const faults = p.faults?.map((f) => (f.value === undefined ? f : { ...f, value: Number(f.value) }));
const injector = faults ? new FaultInjector(world.rank, faults, new TinyLM(model).params) : null;
const comm = injector && p.faults!.some((f) => f.site === 'collective') ? injector.wrap(world) : world;
const metrics = p.logDir ? await TrainMetrics.create({ rank: world.rank, worldSize: world.size, model, peak: null, logDir: p.logDir }) : null;
const sentinel = p.sdc ? new SdcSentinel({ ...p.sdc, ...(metrics ? { metrics } : {}) }) : null;
const health = p.health ? new LossHealth({ ...p.health, ...(metrics ? { metrics } : {}) }) : null;
const probes: StepProbe[] = [...(injector ? [injector] : []), ...(sentinel ? [sentinel] : [])];

let stopped: { code: string; message: string; event: unknown } | null = null;
const r = await train(comm, {
  model, steps: p.steps, globalBatch: G, microBatches: 1,
  parallel: p.parallel === 'fsdp' ? { kind: 'fsdp', stage: p.stage ?? 2 } : { kind: 'ddp' },
  optimizer: { kind: 'adamw', lr: p.lr ?? 3e-2, weightDecay: 0.01 }, dataSeed: 3, ...(p.device ? { device: 'cuda' as const } : {}),
  data: {
    rows(step, rank, rows) {
      const b = p.order?.[step] ?? step;
      const batch = globalBatch(b, G, T, model.vocab, 3);
      // Spike: every row follows t -> 7t + 4, one off the corpus' commonest rule t -> 7t + 3.
      if (p.spike?.includes(b)) for (let i = 0; i < batch.length; i++) if (i % (T + 1)) batch[i] = (batch[i - 1]! * 7 + 4) % model.vocab;
      return rowsOf(batch, T, rank * rows, rows);
    },
  },
  ...(p.ckpt ? { ckpt: { dir: p.ckpt.dir, at: p.ckpt.at, overlap: false } } : {}),
  ...(health ? { health } : {}),
  probes,
  ...(metrics ? { metrics } : {}),
}).catch((err: unknown) => {
  if (!(err instanceof LossHealthError)) throw err;
  stopped = { code: err.code, message: err.message, event: { ...err.event, loss: String(err.event.loss) } };
  return null;
});
if (!r) {
  writeResult({ rank: world.rank, stopped, events: health!.events.map((e) => ({ step: e.step, kind: e.kind, action: e.action })) });
  await world.destroy();
  process.exit(0);
}
const prom = metrics ? await metrics.prom.registry.getMetricsAsJSON() : null;
await metrics?.close();
const flat = new Float32Array(r.params.reduce((a, x) => a + x.length, 0));
let o = 0;
for (const x of r.params) (flat.set(x, o), (o += x.length));
report({ rank: world.rank, done: true });
writeResult({
  rank: world.rank, losses: r.losses.map(String), events: health?.events.map((e) => ({ ...e, loss: String(e.loss), score: String(e.score) })) ?? [],
  sdc: sentinel ? { events: sentinel.events, suspects: sentinel.suspects, checks: sentinel.checks, replays: sentinel.replays } : null,
  fired: injector?.fired.map((f) => ({ ...f, before: String(f.before), after: String(f.after) })) ?? [],
  params: Array.from(flat), prom: prom?.filter((m) => /loss_health|sdc/.test(m.name)) ?? null,
}, world.rank === 0 ? flat : undefined);
await world.destroy();
