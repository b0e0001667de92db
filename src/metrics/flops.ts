/**
 * Model FLOPs and peak device FLOPs: the two halves of MFU (model FLOPs utilization).
 *
 * Model FLOPs follow the convention of PaLM and TorchTitan: count the matrix
 * multiplications of forward and backward, nothing elementwise. Each linear
 * y = x·W with W of shape [in, out] costs 2·in·out FLOPs per token forward
 * (one multiply-add per weight), and 4·in·out backward (dx = dy·Wᵀ and
 * dW += xᵀ·dy), 6·in·out in all: TorchTitan's "6N". Its attention term
 * (12·L·H·Q·T, the QKᵀ and AV matmuls) has no counterpart here: TinyLM mixes
 * tokens by a causal prefix mean that it computes as a running sum, O(D) per
 * token, elementwise like activations and norms; docs/metrics.md says why.
 */
import type { TinyLMConfig } from '../models/tiny-lm/tiny-lm.js';

export interface ModelFlops {
  /** Training FLOPs per token: forward plus backward (6 × matmulParams). */
  perToken: number;
  /** Weights that enter a matrix multiplication: block w1, w2 and the head; not embeddings, biases, mix. */
  matmulParams: number;
  /** Forward FLOPs per token (2 × matmulParams). */
  forwardPerToken: number;
}

export function modelFlops(cfg: Pick<TinyLMConfig, 'vocab' | 'dim' | 'hidden' | 'layers'>): ModelFlops {
  const { vocab: V, dim: D, hidden: H, layers: L } = cfg;
  // Per block: w1 [D, H] and w2 [H, D]; the head: w [D, V]. The embedding lookups are gathers.
  const matmulParams = L * (D * H + H * D) + D * V;
  return { perToken: 6 * matmulParams, matmulParams, forwardPerToken: 2 * matmulParams };
}

/**
 * The same count for src/models/gpt: per block qkv [D, 3D], proj [D, D], fc1 [D, H] and
 * fc2 [H, D], and the head [D, V]; plus the attention matmuls QKᵀ and A·V, which
 * have no weights: 2·T·D per token per layer forward for each over the full T×T
 * square (TorchTitan's 12·L·D·T for forward + backward). The causal kernels of
 * src/models/gpt/layers.ts visit only j ≤ i, (T+1)/2 keys per query on average;
 * `attentionPerToken` counts those, as the kernels run them.
 */
export function gptModelFlops(cfg: { vocab: number; dim: number; hidden: number; layers: number; seqLen: number }): ModelFlops & { attentionPerToken: number } {
  const { vocab: V, dim: D, hidden: H, layers: L, seqLen: T } = cfg;
  const matmulParams = L * (3 * D * D + D * D + 2 * D * H) + D * V;
  // Forward: QKᵀ and A·V, D multiply-adds per visited key each (2·2·D FLOPs); backward twice that.
  const attentionPerToken = L * 3 * 4 * D * ((T + 1) / 2);
  return { perToken: 6 * matmulParams, matmulParams, forwardPerToken: 2 * matmulParams, attentionPerToken };
}

export type Precision = 'bf16' | 'tf32' | 'fp32';

/**
 * Dense peak FLOP/s per GPU. Figures from NVIDIA's datasheets, which quote tensor-core
 * rates with 2:4 sparsity; the dense rate is half of that.
 * - H100 (SXM5, PCIe, NVL) and H200 (SXM, NVL): NVIDIA H100 Tensor Core GPU datasheet and
 *   H200 datasheet (nvidia.com/en-us/data-center/h100/, /h200/): SXM BF16 1,979 TFLOPS*,
 *   TF32 989 TFLOPS*, FP32 67 TFLOPS; PCIe 1,513* / 756* / 51; NVL 1,671* / 835* / 60.
 * - GB200: GB200 NVL72 datasheet (nvidia.com/en-us/data-center/gb200-nvl72/), per GB200
 *   superchip of two Blackwell GPUs: BF16 10 PFLOPS*, TF32 5 PFLOPS*, FP32 160 TFLOPS;
 *   per GPU dense: 2.5 PFLOPS, 1.25 PFLOPS, 80 TFLOPS.
 * (* with sparsity.) Matched against the device name, most specific first.
 */
export const PEAK_FLOPS: readonly { match: RegExp; name: string; bf16: number; tf32: number; fp32: number }[] = [
  { match: /GB200/i, name: 'GB200', bf16: 2.5e15, tf32: 1.25e15, fp32: 80e12 },
  { match: /H200.*NVL/i, name: 'H200 NVL', bf16: 835.5e12, tf32: 417.5e12, fp32: 60e12 },
  { match: /H200/i, name: 'H200 SXM', bf16: 989.5e12, tf32: 494.5e12, fp32: 67e12 },
  { match: /H100.*NVL/i, name: 'H100 NVL', bf16: 835.5e12, tf32: 417.5e12, fp32: 60e12 },
  { match: /H100.*PCIe/i, name: 'H100 PCIe', bf16: 756.5e12, tf32: 378e12, fp32: 51e12 },
  { match: /H100/i, name: 'H100 SXM', bf16: 989.5e12, tf32: 494.5e12, fp32: 67e12 },
];

export interface PeakFlops {
  flops: number;
  /** 'table' (a datasheet figure for `device`) or 'measured' (this process, measureCpuPeak). */
  source: 'table' | 'measured';
  device: string;
  precision: Precision | 'js-float32';
}

/** The datasheet peak of a GPU by its name (NVML's, e.g. "NVIDIA H100 80GB HBM3"), or null when the table lacks it. */
export function gpuPeakFlops(deviceName: string, precision: Precision): PeakFlops | null {
  const row = PEAK_FLOPS.find((r) => r.match.test(deviceName));
  return row ? { flops: row[precision], source: 'table', device: row.name, precision } : null;
}

let cpuPeak: number | undefined;

/**
 * This CPU's peak for the loops TinyLM runs: a float32 multiply-add loop in the shape of
 * src/models/tiny-lm/kernels.ts's linear (four multiply-adds per store, rows that stay
 * in L1), on one thread; the best of rounds of 25 ms, so a round that lost the core to
 * another process does not lower it. The rounds go on for at least `ms` milliseconds and
 * until the best has not risen by a tenth for 200 ms, at most 3 s: V8 compiles the loop's
 * optimized code on a background thread, which on a loaded host can start hundreds of
 * milliseconds late, and the rounds before it run 20-30x slower (a peak taken from them
 * made every MFU that much too high). FLOP/s; measured once per process and cached;
 * `remeasure` measures again (and caches the new figure), for a host whose other
 * processes may have held every core for the whole first measurement.
 */
export function measureCpuPeak(ms = 1000, options: { remeasure?: boolean } = {}): PeakFlops {
  if (cpuPeak === undefined || options.remeasure) {
    const n = 256;
    const w = Float32Array.from({ length: 4 * n }, (_, i) => ((i % 7) - 3) * 1e-3);
    const y = new Float32Array(n);
    const roundMs = 25;
    const start = performance.now();
    let best = 0;
    let risen = start;
    for (let now = start; now - start < 3000 && (now - start < ms || now - risen < 200); ) {
      let reps = 0;
      const t0 = now;
      let t = t0;
      while (t - t0 < roundMs) {
        for (let k = 0; k < 64; k++) {
          const x0 = 1e-3 * k, x1 = x0 + 1e-4, x2 = x0 + 2e-4, x3 = x0 + 3e-4;
          for (let o = 0; o < n; o++) y[o] = y[o]! + x0 * w[o]! + x1 * w[n + o]! + x2 * w[2 * n + o]! + x3 * w[3 * n + o]!;
        }
        reps += 64;
        t = performance.now();
      }
      const rate = (reps * n * 8) / ((t - t0) / 1000);
      if (rate > best * 1.1) risen = t;
      best = Math.max(best, rate);
      now = t;
    }
    if (!Number.isFinite(y[0]!)) throw new Error('the CPU peak loop overflowed');
    cpuPeak = best;
  }
  return { flops: cpuPeak, source: 'measured', device: 'cpu', precision: 'js-float32' };
}

/** MFU of one step: achieved model FLOP/s over the peak of the devices doing it. */
export function mfu(o: { tokens: number; seconds: number; flopsPerToken: number; peakFlops: number; devices?: number }): number {
  return (o.tokens * o.flopsPerToken) / o.seconds / (o.peakFlops * (o.devices ?? 1));
}
