/**
 * The single-process reference: the same model on the whole global batch in
 * one forward/backward, with its own optimizer and clipping code (no runtime
 * imports), so a runtime bug cannot cancel out on both sides.
 */
import { globalBatch } from '../../src/models/tiny-lm/synthetic-corpus.js';
import { TinyLM } from '../../src/models/tiny-lm/tiny-lm.js';
import type { TrainConfig } from '../../src/train/loop.js';

export async function referenceTrain(cfg: TrainConfig): Promise<{ losses: number[]; params: Float32Array[]; norms: number[] }> {
  const model = new TinyLM(cfg.model);
  const T = cfg.model.seqLen;
  const o = cfg.optimizer;
  const m = model.params.map((p) => new Float32Array(p.size));
  const v = model.params.map((p) => new Float32Array(p.size));
  const losses: number[] = [], norms: number[] = [];
  for (let step = 0; step < cfg.steps; step++) {
    const batch = globalBatch(step, cfg.globalBatch, T, cfg.model.vocab, cfg.dataSeed);
    for (const p of model.params) p.grad.fill(0);
    losses.push(await model.forwardBackward(batch, cfg.globalBatch, { gradScale: 1 / (cfg.globalBatch * T) }));
    if (cfg.clipNorm) {
      let s = 0;
      for (const p of model.params) for (const g of p.grad) s += g * g;
      const norm = Math.sqrt(s);
      norms.push(norm);
      const c = Math.min(1, cfg.clipNorm / (norm + 1e-6));
      for (const p of model.params) for (let i = 0; i < p.size; i++) p.grad[i] = p.grad[i]! * c;
    }
    const t = step + 1;
    model.params.forEach((p, k) => {
      for (let i = 0; i < p.size; i++) {
        const g = p.grad[i]!;
        if (o.kind === 'sgd') {
          p.data[i] = p.data[i]! - o.lr * (g + (o.weightDecay ?? 0) * p.data[i]!);
          continue;
        }
        const b1 = o.beta1 ?? 0.9, b2 = o.beta2 ?? 0.999, eps = o.eps ?? 1e-8, wd = o.weightDecay ?? 0;
        m[k]![i] = b1 * m[k]![i]! + (1 - b1) * g;
        v[k]![i] = b2 * v[k]![i]! + (1 - b2) * g * g;
        const mh = m[k]![i]! / (1 - b1 ** t), vh = v[k]![i]! / (1 - b2 ** t);
        p.data[i] = p.data[i]! - o.lr * (mh / (Math.sqrt(vh) + eps) + wd * p.data[i]!);
      }
    });
  }
  return { losses, params: model.params.map((p) => p.data), norms };
}
