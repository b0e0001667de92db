/**
 * One nccl-node rank of the overlap-vs-torch benchmark (overlap-torch.ts); its twin
 * for torch DDP is overlap_torch.py, the same workload step for step:
 *
 * - L parameters of P float32 each; forward and backward walk them, doing a fixed
 *   number of compute units per layer (a 32x32 float32 matrix product, calibrated
 *   once so that a layer costs the asked milliseconds on this side);
 * - backward runs layers in reverse, writes each layer's gradient (rank + 1 + the
 *   layer index / L) and marks it ready, as a model's backward does through ModelHooks;
 * - modes, interleaved step by step so each sees the same machine load: no gradient
 *   sync (setRequiresGradSync(false), torch's no_sync), and DDP per bucket cap.
 *
 * Reports per mode the median step (barrier, forward, backward, finish), and the
 * median of one all-reduce of every gradient with nothing else running.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { setPriority } from 'node:os';
import { init } from '../../src/comm/init.js';
import { DistributedDataParallel } from '../../src/runtime/ddp.js';
import { createOptimizer } from '../../src/runtime/optim.js';
import type { ModelHooks, ParamLike } from '../../src/runtime/types.js';
import { readPayload, writeResult } from '../../test/helpers/ranks.js';
import { median } from '../stats.js';

export interface OverlapPayload {
  layers: number;
  layerFloats: number;
  fwdMs: number;
  bwdMs: number;
  steps: number;
  warmup: number;
  /** 'default' (1 MiB first bucket, 25 MiB the rest), 'single' (one bucket after backward) or a cap in MiB for every bucket. */
  caps: (string | number)[];
}

export interface SideResult {
  side: string;
  rank: number;
  unitsPerLayer: { fwd: number; bwd: number };
  /** Median ms per mode ('nosync' and one per cap). */
  stepMs: Record<string, number>;
  bucketBytes: Record<string, number[]>;
  loneAllReduceMs: number;
  /**
   * Per mode, ms per step from /proc/self/task/<tid>/schedstat: CPU time and time spent
   * runnable but waiting for a core, of the main (compute) thread and of all other threads.
   */
  sched: Record<string, { mainCpu: number; mainWait: number; otherCpu: number; otherWait: number }>;
  /** The reference's version (torch). */
  version?: string;
  /** Diagnostics of the last step per cap: ms from step start to backward end, and to each bucket's launch and completion. */
  lastStep?: Record<string, { backwardEndMs: number; buckets: { launch: number; done: number; bytes: number }[] }>;
}

const p = readPayload<OverlapPayload>();
const comm = await init();
// Diagnostics: OVERLAP_OTHER_NICE gives every thread but the compute thread that nice
// (setpriority on a thread id sets that thread's), the same on both sides.
if (process.env.OVERLAP_OTHER_NICE) {
  for (const tid of readdirSync('/proc/self/task')) if (Number(tid) !== process.pid) setPriority(Number(tid), Number(process.env.OVERLAP_OTHER_NICE));
}
const MiB = 1024 * 1024;

// The compute unit: c += a·b for 32x32 float32 matrices (L1-resident, compute bound).
const N = 32;
const A = new Float32Array(N * N).fill(1e-3), Bm = new Float32Array(N * N).fill(1e-3), C = new Float32Array(N * N);
function units(n: number): void {
  for (let u = 0; u < n; u++) {
    for (let i = 0; i < N; i++) {
      for (let k = 0; k < N; k++) {
        const a = A[i * N + k]!;
        const ci = i * N, bk = k * N;
        for (let j = 0; j < N; j++) C[ci + j] = C[ci + j]! + a * Bm[bk + j]!;
      }
    }
  }
}

// Calibrate: units per ms on this core, averaged over ranks so both do the same work.
units(2000);
const t0 = performance.now();
let done = 0;
while (performance.now() - t0 < 300) {
  units(100);
  done += 100;
}
const rate = new Float64Array([done / (performance.now() - t0)]);
await comm.allReduce(rate, { op: 'avg' });
const fwdUnits = Math.max(1, Math.round(p.fwdMs * rate[0]!));
const bwdUnits = Math.max(1, Math.round(p.bwdMs * rate[0]!));

class Model {
  readonly params: ParamLike[];
  readonly #gradOf: Float32Array[];
  constructor(L: number, P: number, rank: number) {
    this.params = Array.from({ length: L }, (_, l) => ({ name: `layer${l}.w`, size: P, data: new Float32Array(P), grad: new Float32Array(P) }));
    this.#gradOf = Array.from({ length: L }, (_, l) => new Float32Array(P).fill(rank + 1 + l / L));
  }

  /** Forward then backward; hooks as TinyLM calls them (await per unit, gradReady per parameter). */
  async forwardBackward(hk: ModelHooks): Promise<void> {
    const L = this.params.length;
    for (let l = 0; l < L; l++) {
      await hk.beforeForward?.(l);
      units(fwdUnits);
    }
    for (let l = L - 1; l >= 0; l--) {
      await hk.beforeBackward?.(l);
      units(bwdUnits);
      const w = this.params[l]!;
      w.grad.set(this.#gradOf[l]!);
      hk.gradReady?.(w);
      hk.afterBackward?.(l);
    }
  }
}

const optionsOf = (cap: string | number) =>
  cap === 'default' ? {} : cap === 'single' ? { firstBucketBytes: 2 ** 31 - 1, bucketBytes: 2 ** 31 - 1 } : { firstBucketBytes: Math.round(Number(cap) * MiB), bucketBytes: Math.round(Number(cap) * MiB) };

const modes: { name: string; model: Model; ddp: DistributedDataParallel; sync: boolean }[] = [];
for (const cap of ['nosync', ...p.caps.map(String)]) {
  const model = new Model(p.layers, p.layerFloats, comm.rank);
  const ddp = await DistributedDataParallel.create(comm, model.params, createOptimizer({ kind: 'sgd', lr: 1e-3 }), cap === 'nosync' ? {} : optionsOf(cap));
  ddp.setRequiresGradSync(cap !== 'nosync');
  modes.push({ name: cap, model, ddp, sync: cap !== 'nosync' });
}

/** [main cpu, main wait, others' cpu, others' wait] in ns, from the kernel's per-thread schedstat. */
function schedNow(): number[] {
  const t = [0, 0, 0, 0];
  for (const tid of readdirSync('/proc/self/task')) {
    try {
      const [cpu, wait] = readFileSync(`/proc/self/task/${tid}/schedstat`, 'utf8').split(' ').map(Number);
      const o = Number(tid) === process.pid ? 0 : 2;
      t[o] = t[o]! + cpu!;
      t[o + 1] = t[o + 1]! + wait!;
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return t;
}
const schedSum: Record<string, number[]> = Object.fromEntries(modes.map((m) => [m.name, [0, 0, 0, 0]]));

const samples: Record<string, number[]> = Object.fromEntries(modes.map((m) => [m.name, []]));
const lastStep: NonNullable<SideResult['lastStep']> = {};
for (let s = 0; s < p.warmup + p.steps; s++) {
  for (const m of modes) {
    m.ddp.zeroGrad();
    const before = schedNow();
    await comm.barrier();
    const t0 = performance.now();
    await m.model.forwardBackward(m.ddp.hooks);
    const t1 = performance.now();
    await m.ddp.finish();
    const t2 = performance.now();
    if (s >= p.warmup) {
      samples[m.name]!.push(t2 - t0);
      const after = schedNow();
      for (let i = 0; i < 4; i++) schedSum[m.name]![i]! += after[i]! - before[i]!;
    }
    if (m.sync && s === p.warmup + p.steps - 1) {
      lastStep[m.name] = {
        backwardEndMs: +(t1 - t0).toFixed(2),
        buckets: m.ddp.timings().map((b) => ({ launch: +(b.launchedAt - t0).toFixed(2), done: +(b.doneAt - t0).toFixed(2), bytes: b.bytes })),
      };
      // The mean over ranks of rank r's gradient (r + 1 + l / L): a wrong or missing bucket shows here.
      const W = comm.size;
      for (const [l, w] of m.model.params.entries()) {
        const want = Math.fround((W + 1) / 2 + l / p.layers);
        if (Math.abs(w.grad[0]! - want) > 1e-5 || Math.abs(w.grad[w.size - 1]! - want) > 1e-5) {
          throw new Error(`${m.name}: layer ${l} gradient ${w.grad[0]} after finish, expected ${want}`);
        }
      }
    }
  }
}

// The lone all-reduce: every gradient in one call, nothing else running.
const flat = new Float32Array(p.layers * p.layerFloats);
const lone: number[] = [];
for (let s = 0; s < p.warmup + p.steps; s++) {
  await comm.barrier();
  const t0 = performance.now();
  await comm.allReduce(flat, { op: 'avg' });
  if (s >= p.warmup) lone.push(performance.now() - t0);
}

const result: SideResult = {
  side: 'nccl-node',
  rank: comm.rank,
  unitsPerLayer: { fwd: fwdUnits, bwd: bwdUnits },
  stepMs: Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, median(v)])),
  bucketBytes: Object.fromEntries(modes.filter((m) => m.sync).map((m) => [m.name, m.ddp.buckets.map((b) => b.flat.byteLength)])),
  loneAllReduceMs: median(lone),
  sched: Object.fromEntries(Object.entries(schedSum).map(([k, v]) => {
    const ms = v.map((x) => +(x / 1e6 / p.steps).toFixed(2));
    return [k, { mainCpu: ms[0]!, mainWait: ms[1]!, otherCpu: ms[2]!, otherWait: ms[3]! }];
  })),
  lastStep,
};
writeResult(result);
await comm.destroy();
