/**
 * Per-layout estimates: memory per GPU, communication per step per axis, pipeline
 * bubble and step time. Every formula names its source; docs/plan.md states them.
 */
import type { GpuSpec } from './hardware.js';
import type { Layout, PlanOptions } from './schema.js';

/** Model shape as far as it is known; params always. */
export interface Shape { params: number; layers?: number; hidden?: number; heads?: number; seq?: number; vocab?: number }

/**
 * Bytes per parameter of weights, gradients and optimizer state. Mixed-precision
 * Adam: 2 (bf16 weights) + 2 (bf16 gradients) + 12 (fp32 master weights, momentum,
 * variance) = 16, ZeRO paper (Rajbhandari et al. 2020, section 3.1, K = 12).
 * fp32 Adam: 4 + 4 + 8 (momentum and variance) = 16.
 */
export const STATE_BYTES = {
  'bf16-mixed': { weights: 2, grads: 2, optimizer: 12 },
  fp32: { weights: 4, grads: 4, optimizer: 8 },
} as const;

export interface Memory {
  weights: number; grads: number; optimizer: number;
  /** Activations of the in-flight micro-batches; null when the shape lacks seq/hidden/heads/layers. */
  activations: number | null;
  total: number;
  fits: boolean;
}

export interface AxisComm {
  /** Bytes this GPU sends per step on this axis. */
  bytes: number;
  tier: 'nvlink' | 'ib' | 'none';
  seconds: number;
  /** Part of `seconds` not hidden behind compute. */
  exposedSeconds: number;
}

export interface Estimate {
  layout: Layout;
  memory: Memory;
  comm: { dp: AxisComm; tp: AxisComm; pp: AxisComm };
  /** Idle fraction of the pipeline schedule. */
  bubble: number;
  /** Tokens per optimizer step (null without seq). */
  tokensPerStep: number | null;
  computeSeconds: number | null;
  stepSeconds: number | null;
  mfu: number | null;
}

/**
 * Activation bytes of one transformer layer for one micro-batch, Korthikanti et al.
 * 2022, "Reducing Activation Recomputation in Large Transformer Models", section 4:
 * no parallelism s·b·h·(34 + 5·a·s/h) (eq. 1); tensor parallel t without sequence
 * parallelism s·b·h·(10 + 24/t + 5·a·s/(h·t)) (eq. 2); with sequence parallelism
 * everything /t (eq. 3); selective recomputation drops the 5·a·s/h attention term
 * (eq. 6, section 5); full recomputation keeps only the layer input, 2·s·b·h (/t with
 * sequence parallelism) (section 4.3).
 */
export function layerActivationBytes(s: number, b: number, h: number, a: number, t: number, sp: boolean,
  recompute: PlanOptions['recompute']): number {
  const sbh = s * b * h;
  const attn = recompute === 'selective' ? 0 : (5 * a * s) / h;
  if (recompute === 'full') return (2 * sbh) / (sp ? t : 1);
  if (sp || t === 1) return (sbh * (34 + attn)) / t;
  return sbh * (10 + 24 / t + attn / t);
}

/**
 * Micro-batches whose activations the first pipeline stage holds at its peak
 * (Korthikanti et al. 2022, section 4.2.3): 1F1B holds p of them (min(m, p)), GPipe
 * all m, and the interleaved schedule with v chunks p·(1 + (p−1)/(p·v)).
 */
export function inFlightMicroBatches(l: Layout): number {
  const { pp: p, microBatches: m } = l;
  if (l.schedule === 'gpipe') return m;
  const base = Math.min(m, p);
  return l.schedule === 'interleaved' ? base * (1 + (p - 1) / (p * l.virtualStages)) : base;
}

/**
 * Pipeline bubble as a fraction of the step, Narayanan et al. 2021, "Efficient
 * Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", sections
 * 2.2.1-2.2.2: bubble time / ideal time = (p−1)/(v·m), so of the whole step
 * (p−1)/(v·m + p − 1); with v = 1 (GPipe, 1F1B) that is (p−1)/(m+p−1).
 */
export function bubbleFraction(l: Layout): number {
  const v = l.schedule === 'interleaved' ? l.virtualStages : 1;
  return (l.pp - 1) / (v * l.microBatches + l.pp - 1);
}

/** Ring all-reduce: every GPU sends 2(n−1)/n of the buffer (Patarasuk & Yuan 2009). */
export const allReduceBytes = (n: number, bytes: number): number => (n <= 1 ? 0 : (2 * (n - 1) * bytes) / n);

export function memory(o: PlanOptions, shape: Shape, l: Layout, gpu: GpuSpec): Memory {
  const perStage = shape.params / (l.tp * l.pp);
  const b = STATE_BYTES[o.precision];
  const z = o.zeroStage;
  // ZeRO (Rajbhandari et al. 2020, section 5, fig. 1): stage 1 shards the optimizer
  // state over dp, stage 2 also the gradients, stage 3 also the weights.
  const weights = (perStage * b.weights) / (z >= 3 ? l.dp : 1);
  const grads = (perStage * b.grads) / (z >= 2 ? l.dp : 1);
  const optimizer = (perStage * b.optimizer) / (z >= 1 ? l.dp : 1);
  let activations: number | null = null;
  const { layers, hidden, heads, seq } = shape;
  if (layers && hidden && heads && seq) {
    const perLayer = layerActivationBytes(seq, l.microBatchSize, hidden, heads, l.tp, o.sequenceParallel && l.tp > 1, o.recompute);
    activations = (layers / l.pp) * inFlightMicroBatches(l) * perLayer;
  }
  const total = weights + grads + optimizer + (activations ?? 0);
  return { weights, grads, optimizer, activations, total, fits: total <= gpu.hbmBytes };
}

function axis(bytes: number, tier: AxisComm['tier'], gpu: GpuSpec): AxisComm {
  const bw = tier === 'nvlink' ? gpu.nvlinkBandwidth : gpu.ibBandwidth;
  const seconds = tier === 'none' ? 0 : bytes / bw;
  return { bytes, tier: bytes === 0 ? 'none' : tier, seconds, exposedSeconds: seconds };
}

export function estimate(o: PlanOptions, shape: Shape, l: Layout, gpu: GpuSpec, domain: number, count: number): Estimate {
  const mem = memory(o, shape, l, gpu);
  const { hidden, seq, layers } = shape;
  const act = 2; // bf16 activations on the wire
  const m = l.microBatches;
  const v = l.schedule === 'interleaved' ? l.virtualStages : 1;
  // Data parallel: the gradients of this GPU's stage slice, ring all-reduced; ZeRO 1/2
  // do reduce-scatter + all-gather (same volume), ZeRO 3 adds a parameter all-gather:
  // 3Ψ instead of 2Ψ (Rajbhandari et al. 2020, section 7.2).
  const gradBytes = (shape.params / (l.tp * l.pp)) * STATE_BYTES[o.precision].grads;
  const dpBytes = allReduceBytes(l.dp, gradBytes) * (o.zeroStage === 3 ? 1.5 : 1);
  // tp innermost in the NVLink domain, dp next (Narayanan et al. 2021, section 3.3).
  const dp = axis(dpBytes, l.tp * l.dp <= domain ? 'nvlink' : 'ib', gpu);
  let tp = axis(0, 'none', gpu);
  let pp = axis(0, 'none', gpu);
  if (hidden && seq && layers) {
    const msg = seq * l.microBatchSize * hidden * act;
    // Tensor parallel: 2 all-reduces in forward and 2 in backward per layer per
    // micro-batch (Shoeybi et al. 2019, section 3, fig. 4); sequence parallelism turns
    // each into all-gather + reduce-scatter with the same volume (Korthikanti et al.
    // 2022, section 4.2.2); full recomputation repeats the forward pair.
    const perLayer = o.recompute === 'full' ? 6 : 4;
    tp = axis((layers / l.pp) * m * perLayer * allReduceBytes(l.tp, msg), l.tp <= domain ? 'nvlink' : 'ib', gpu);
    // Pipeline: each micro-batch sends its activations forward and their gradients
    // back at every stage boundary, split over tp (Narayanan et al. 2021, section 4.1
    // scatter/gather), v times with interleaving.
    const ppBytes = l.pp > 1 ? 2 * m * v * (msg / (o.sequenceParallel ? l.tp : 1)) : 0;
    pp = axis(ppBytes, l.tp * l.dp * l.pp <= domain ? 'nvlink' : 'ib', gpu);
  }
  const bubble = bubbleFraction(l);
  const tokensPerStep = seq ? l.dp * m * l.microBatchSize * seq : null;
  let computeSeconds: number | null = null;
  let stepSeconds: number | null = null;
  let mfu: number | null = o.mfu ?? null;
  if (tokensPerStep !== null) {
    // 6·N FLOPs per token for forward + backward (Kaplan et al. 2020, section 2.1);
    // full recomputation runs the forward again: 8·N (Korthikanti et al. 2022, section 6).
    const modelFlops = 6 * shape.params * tokensPerStep;
    const hwFlops = (o.recompute === 'full' ? 8 / 6 : 1) * modelFlops;
    if (o.mfu !== undefined) {
      stepSeconds = modelFlops / (count * gpu.peakBf16Flops * o.mfu);
    } else {
      computeSeconds = hwFlops / (count * gpu.peakBf16Flops * o.efficiency);
      // Backward (2/3 of the FLOPs) hides the bucketed gradient all-reduce (Li et al.
      // 2020, "PyTorch Distributed", section 3.2.3); the rest of dp traffic is exposed.
      dp.exposedSeconds = Math.max(0, dp.seconds - (2 / 3) * computeSeconds);
      const stage = (computeSeconds + tp.exposedSeconds) / (1 - bubble);
      stepSeconds = stage + pp.exposedSeconds + dp.exposedSeconds;
      mfu = modelFlops / (stepSeconds * count * gpu.peakBf16Flops);
    }
  }
  return { layout: l, memory: mem, comm: { dp, tp, pp }, bubble, tokensPerStep, computeSeconds, stepSeconds, mfu };
}
