// MFU's parts: model FLOPs per token against a hand count and against the matmuls
// TinyLM actually runs (its kernels counted as they execute), the peak table against
// NVIDIA's datasheet figures, the MFU formula, and a 2-rank run whose step-time split
// must add up to the step and put a slow rank's wait where it belongs.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { gpuPeakFlops, measureCpuPeak, mfu, modelFlops, type StepSample, type CheckpointSample } from '../../src/metrics/index.js';
import { TinyLM } from '../../src/models/tiny-lm/tiny-lm.js';
import { linear } from '../../src/models/tiny-lm/kernels.js';
import { runRanks } from '../helpers/ranks.js';

// Multiply-adds of every linear TinyLM runs, from the arguments of each call.
const macs = { forward: 0, backward: 0 };
vi.mock('../../src/models/tiny-lm/kernels.js', async (importOriginal) => {
  const k = await importOriginal<typeof import('../../src/models/tiny-lm/kernels.js')>();
  return {
    ...k,
    linear: (...a: Parameters<typeof k.linear>) => { macs.forward += a[4] * a[5] * a[6]; return k.linear(...a); },
    linearBackward: (...a: Parameters<typeof k.linearBackward>) => {
      // dW += xᵀ·dy always; dx = dy·Wᵀ when dx is asked for.
      macs.backward += a[6] * a[7] * a[8] * (a[3] ? 2 : 1);
      return k.linearBackward(...a);
    },
  };
});

const SMALL = { vocab: 11, dim: 4, hidden: 6, layers: 2, seqLen: 5, seed: 1 };

describe('model FLOPs per token', () => {
  it('matches a hand count for a small config', () => {
    // Per token, per layer: w1 4x6 = 24 and w2 6x4 = 24 multiply-adds; head 4x11 = 44.
    // Forward 2 x (2 x 48 + 44) = 280 FLOPs; backward twice that (dx and dW): 560. Total 840.
    expect(modelFlops(SMALL)).toEqual({ perToken: 840, forwardPerToken: 280, matmulParams: 140 });
  });

  it('matches the multiply-adds TinyLM executes in forward and backward', async () => {
    for (const cfg of [SMALL, { vocab: 37, dim: 12, hidden: 29, layers: 3, seqLen: 7, seed: 2 }]) {
      macs.forward = macs.backward = 0;
      const m = new TinyLM(cfg);
      const batch = 3;
      const tokens = Int32Array.from({ length: batch * (cfg.seqLen + 1) }, (_, i) => (i * 7) % cfg.vocab);
      await m.forwardBackward(tokens, batch, { gradScale: 1 });
      const n = batch * cfg.seqLen;
      expect(2 * macs.forward / n).toBe(modelFlops(cfg).forwardPerToken);
      expect((2 * macs.forward + 2 * macs.backward) / n).toBe(modelFlops(cfg).perToken);
    }
  });
});

describe('peak FLOPs and MFU', () => {
  it('reads dense peaks from the datasheet figures (sparse / 2)', () => {
    // NVIDIA datasheets: H100 SXM BF16 1,979 TFLOPS and TF32 989 TFLOPS with sparsity, FP32 67;
    // H100 PCIe BF16 1,513 with sparsity; GB200 superchip (2 GPUs) BF16 10 PFLOPS with sparsity, FP32 160 TFLOPS.
    const near = (a: number | undefined, b: number) => expect(Math.abs(a! - b) / b).toBeLessThan(0.002);
    near(gpuPeakFlops('NVIDIA H100 80GB HBM3', 'bf16')?.flops, 1979e12 / 2);
    near(gpuPeakFlops('NVIDIA H100 80GB HBM3', 'tf32')?.flops, 989e12 / 2);
    near(gpuPeakFlops('NVIDIA H100 80GB HBM3', 'fp32')?.flops, 67e12);
    near(gpuPeakFlops('NVIDIA H100 PCIe', 'bf16')?.flops, 1513e12 / 2);
    near(gpuPeakFlops('NVIDIA H200', 'bf16')?.flops, 1979e12 / 2);
    near(gpuPeakFlops('NVIDIA GB200', 'bf16')?.flops, 10e15 / 2 / 2);
    near(gpuPeakFlops('NVIDIA GB200', 'fp32')?.flops, 160e12 / 2);
    expect(gpuPeakFlops('NVIDIA A100-SXM4-80GB', 'bf16')).toBeNull();
  });

  it('computes MFU as model FLOP/s over peak', () => {
    // 4096 tokens x 840 FLOPs = 3,440,640 FLOPs in 0.5 s = 6,881,280 FLOP/s; over 1 GFLOP/s.
    expect(mfu({ tokens: 4096, seconds: 0.5, flopsPerToken: 840, peakFlops: 1e9 })).toBeCloseTo(0.00688128, 12);
    expect(mfu({ tokens: 4096, seconds: 0.5, flopsPerToken: 840, peakFlops: 1e9, devices: 2 })).toBeCloseTo(0.00344064, 12);
  });

  it("measures a CPU peak that TinyLM's own linear kernel does not beat", () => {
    const [n, i, o] = [64, 256, 256];
    const x = new Float32Array(n * i).fill(0.01), w = new Float32Array(i * o).fill(0.02), y = new Float32Array(n * o);
    // Same loop shape, so the kernel reaches at most about the peak (2x: another process may
    // have had the core). The other test files' ranks can hold both cores of a 2-core host
    // for the whole of one peak measurement and be gone for the kernel's rounds right after
    // it (a CI run: peak 0.90, kernel 1.82 GFLOP/s): up to three peak-then-kernel attempts,
    // the last one judged. A kernel that beats the peak loop fails every attempt.
    let peak = measureCpuPeak();
    let best = Infinity;
    for (let attempt = 0; attempt < 3 && best >= 2 * peak.flops; attempt++) {
      if (attempt > 0) peak = measureCpuPeak(1000, { remeasure: true });
      best = 0;
      for (let round = 0; round < 5; round++) {
        const t0 = performance.now();
        for (let k = 0; k < 4; k++) linear(x, w, null, y, n, i, o);
        best = Math.max(best, (4 * 2 * n * i * o) / ((performance.now() - t0) / 1000));
      }
    }
    expect(peak.source).toBe('measured');
    expect(peak.flops).toBeGreaterThan(1e7);
    expect(best).toBeLessThan(2 * peak.flops);
  });
});

interface WorkerResult {
  samples: StepSample[];
  checkpoints: CheckpointSample[];
  span: number;
  losses: number[];
  numParams: number;
  collectives: Record<string, { calls: number; bytes: number; seconds: number }>;
  flopsPerToken: number;
  peak: { flops: number };
}

describe('step-time split on 2 ranks, rank 1 with a 60 ms input pipeline', () => {
  const dir = mkdtempSync(join(tmpdir(), 'nccl-node-metrics-split-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const steps = 8;
  const run = runRanks<WorkerResult>('test/metrics/train-worker.ts', 2, {
    payload: { steps, globalBatch: 8, delayMs: { 1: 60 }, ckptDir: join(dir, 'ck'), ckptEvery: 4 }, check: true, timeoutMs: 60_000,
  }).then((rs) => rs.map((r) => r.result!));
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

  it('the phases add up to each step, and the steps to the outside clock', async () => {
    for (const r of await run) {
      expect(r.samples.map((s) => s.step)).toEqual([...Array(steps).keys()]);
      for (const s of r.samples) {
        const sum = s.phases.data + s.phases.compute + s.phases.comm + s.phases.checkpoint;
        expect(Math.abs(sum - s.seconds)).toBeLessThan(1e-6);
      }
      // Nothing between one step's end and the next one's begin but the collector's own
      // bookkeeping (the registry update, the JSON line), a few percent at most even on a
      // contended 2-core machine: the steps cover the span.
      const total = r.samples.reduce((a, s) => a + s.seconds, 0);
      expect(total / r.span).toBeGreaterThan(0.9);
      expect(total).toBeLessThanOrEqual(r.span + 1e-6);
      expect(r.samples.map((s) => s.loss)).toEqual(r.losses);
    }
  });

  it("puts rank 1's input wait in its data phase and rank 0's wait for it in exposed communication", async () => {
    const [r0, r1] = await run;
    const later = (r: WorkerResult) => r.samples.slice(1);
    expect(Math.min(...later(r1!).map((s) => s.phases.data))).toBeGreaterThanOrEqual(0.059);
    expect(median(later(r0!).map((s) => s.phases.data))).toBeLessThan(0.005);
    expect(median(later(r0!).map((s) => s.phases.comm))).toBeGreaterThan(0.045);
    expect(median(later(r1!).map((s) => s.phases.comm))).toBeLessThan(median(later(r0!).map((s) => s.phases.comm)) - 0.03);
  });

  it('counts each checkpoint save call in the checkpoint phase of its step, and records its size', async () => {
    for (const r of await run) {
      expect(r.checkpoints.map((c) => c.step)).toEqual([4, 8]);
      for (const c of r.checkpoints) {
        expect(r.samples[c.step - 1]!.phases.checkpoint).toBeGreaterThanOrEqual(c.saveCallSeconds);
        // Parameters and the two AdamW moments in float32, at least.
        expect(c.bytes).toBeGreaterThan(3 * 4 * r.numParams);
        expect(c.commitSeconds).toBeGreaterThan(0);
      }
    }
  });

  it('reports MFU from its tokens, time, FLOPs per token and peak', async () => {
    for (const r of await run) {
      for (const s of r.samples) {
        expect(s.tokens).toBe((8 / 2) * 8); // 4 rows of seqLen 8 per rank
        expect(s.mfu!).toBeCloseTo((s.tokens * r.flopsPerToken) / s.seconds / r.peak.flops, 12);
      }
    }
  });

  it("counts the gradient all-reduce's bytes: every parameter in float32, every step", async () => {
    for (const r of await run) {
      const ar = r.collectives.allReduce!;
      const grads = steps * r.numParams * 4;
      // Plus the loss, one float64 per step; DDP's clipping needs no communication.
      expect(ar.bytes).toBe(grads + steps * 8);
      expect(ar.calls).toBe(2 * steps); // one bucket (a few thousand parameters) and the loss
      expect(ar.seconds).toBeGreaterThan(0);
    }
  });
});

describe('FSDP stage 3 on 2 ranks, rank 1 with a 60 ms input pipeline', () => {
  const steps = 6;
  const run = runRanks<WorkerResult>('test/metrics/train-worker.ts', 2, {
    payload: { steps, globalBatch: 8, delayMs: { 1: 60 }, parallel: 'fsdp' }, check: true, timeoutMs: 60_000,
  }).then((rs) => rs.map((r) => r.result!));

  it("counts rank 0's wait in the parameter gathers as exposed communication, not compute", async () => {
    const [r0, r1] = await run;
    const later = r0!.samples.slice(1);
    for (const s of later) {
      expect(s.phases.comm).toBeGreaterThan(0.045);
      expect(s.phases.compute).toBeLessThan(s.phases.comm);
    }
    expect(Math.min(...r1!.samples.slice(1).map((s) => s.phases.data))).toBeGreaterThanOrEqual(0.059);
  });

  it('counts the reduce-scatter of every gradient, every step', async () => {
    for (const r of await run) {
      const rs = r.collectives.reduceScatter!;
      // The input of each reduce-scatter is a unit's full gradient, padded to a multiple of the 2 ranks (4 units).
      expect(rs.bytes).toBeGreaterThanOrEqual(steps * r.numParams * 4);
      expect(rs.bytes).toBeLessThanOrEqual(steps * (r.numParams + 4 * 1) * 4);
      // Every forward gathers every unit; backward regathers those resharded after forward.
      const gathered = r.collectives.allGather!.bytes;
      expect(gathered).toBeGreaterThanOrEqual(steps * r.numParams * 4);
      expect(gathered).toBeLessThan(2 * steps * (r.numParams + 4) * 4 + 16384); // plus the summary's object exchange
    }
  });
});
