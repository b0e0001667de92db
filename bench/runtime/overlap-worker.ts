/**
 * One rank of the overlap benchmark. Per mode, times forward+backward (compute)
 * and the wait in finish() after backward returns: that wait is the part of
 * the gradient all-reduce left exposed. Modes: compute alone (no hooks, no
 * communication), one all-reduce after backward (a single bucket), and
 * bucketed overlap at the default and at smaller bucket caps.
 */
import { init } from '../../src/comm/init.js';
import { DistributedDataParallel } from '../../src/runtime/ddp.js';
import { createOptimizer } from '../../src/runtime/optim.js';
import { globalBatch, rowsOf } from '../../src/models/tiny-lm/synthetic-corpus.js';
import { DEFAULT_CONFIG, TinyLM } from '../../src/models/tiny-lm/tiny-lm.js';
import { readPayload, writeResult } from '../../test/helpers/ranks.js';

const { rowsPerRank, steps, warmup } = readPayload<{ rowsPerRank: number; steps: number; warmup: number }>();
const comm = await init();
const cfg = DEFAULT_CONFIG;
const T = cfg.seqLen;
const MiB = 1024 * 1024;
const modes = {
  compute: null,
  'one all-reduce after backward': { firstBucketBytes: 1024 * MiB, bucketBytes: 1024 * MiB },
  'buckets 1 MiB / 25 MiB (default)': {},
  'buckets 1 MiB / 2 MiB': { firstBucketBytes: MiB, bucketBytes: 2 * MiB },
} as const;

const results: Record<string, { computeMs: number; exposedMs: number; skewMs: number; stepMs: number; buckets: number }> = {};
for (const [name, opts] of Object.entries(modes)) {
  const model = new TinyLM(cfg);
  const ddp = opts ? await DistributedDataParallel.create(comm, model.params, createOptimizer({ kind: 'sgd', lr: 1e-3 }), opts) : null;
  let compute = 0, exposed = 0, total = 0, skew = 0;
  for (let s = 0; s < warmup + steps; s++) {
    const batch = rowsOf(globalBatch(s, rowsPerRank * comm.size, T, cfg.vocab, 1), T, comm.rank * rowsPerRank, rowsPerRank);
    ddp?.zeroGrad();
    await comm.barrier(); // start together, so a slow rank's lag is not counted as communication
    const t0 = performance.now();
    await model.forwardBackward(batch, rowsPerRank, { gradScale: 1 / (rowsPerRank * T), ...(ddp ? { hooks: ddp.hooks } : {}) });
    const t1 = performance.now();
    await ddp?.finish();
    const t2 = performance.now();
    // Exposed communication starts when the LAST rank's backward ends: before
    // that, waiting in finish() is rank skew (load imbalance), not communication.
    // Ranks share one host clock (timeOrigin + now), so their times compare.
    const ends = new Float64Array(comm.size);
    await comm.allGather(new Float64Array([performance.timeOrigin + t1]), ends);
    const lastEnd = Math.max(...ends) - performance.timeOrigin;
    if (s >= warmup) {
      compute += t1 - t0;
      exposed += Math.max(0, t2 - Math.max(t1, lastEnd));
      skew += lastEnd - t1;
      total += t2 - t0;
    }
  }
  results[name] = { computeMs: compute / steps, exposedMs: exposed / steps, skewMs: skew / steps, stepMs: total / steps, buckets: ddp?.buckets.length ?? 0 };
}

// Communication alone: one all-reduce of every gradient, no compute running.
const grads = new Float32Array(new TinyLM(cfg).numParams);
let comm0 = 0;
for (let s = 0; s < warmup + steps; s++) {
  await comm.barrier();
  const t0 = performance.now();
  await comm.allReduce(grads, { op: 'avg' });
  if (s >= warmup) comm0 += performance.now() - t0;
}
writeResult({ rank: comm.rank, results, commAloneMs: comm0 / steps, params: grads.length });
await comm.destroy();
