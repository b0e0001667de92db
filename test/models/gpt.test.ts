/**
 * The hand-written GPT backward against central finite differences of its own
 * forward loss: for sampled entries of every parameter, d(mean loss)/dp from
 * forwardBackward must match (L(p+h) - L(p-h)) / 2h. Parameters are re-drawn large
 * enough that every gradient is well above float32's rounding of the loss.
 */
import { describe, expect, it } from 'vitest';
import { GPT, GPT_TEST_CONFIG } from '../../src/models/gpt/gpt.js';
import { mulberry32 } from '../../src/util/prng.js';

const BATCH = 2;

function setup(): { model: GPT; tokens: Int32Array } {
  const cfg = { ...GPT_TEST_CONFIG, vocab: 13, dim: 8, heads: 2, hidden: 12, seqLen: 5, layers: 2 };
  const model = new GPT(cfg);
  const r = mulberry32(99);
  for (const p of model.params) {
    const base = p.name.endsWith('.g') ? 1 : 0;
    for (let i = 0; i < p.size; i++) p.data[i] = base + (r() * 2 - 1) * 0.6;
  }
  const tokens = Int32Array.from({ length: BATCH * (cfg.seqLen + 1) }, () => Math.floor(r() * cfg.vocab));
  return { model, tokens };
}

async function lossOf(model: GPT, tokens: Int32Array): Promise<number> {
  for (const p of model.params) p.grad.fill(0);
  return model.forwardBackward(tokens, BATCH, { gradScale: 0 });
}

describe('GPT forward/backward', () => {
  it('matches finite differences for every parameter', async () => {
    const { model, tokens } = setup();
    const N = BATCH * model.cfg.seqLen;
    for (const p of model.params) p.grad.fill(0);
    await model.forwardBackward(tokens, BATCH, { gradScale: 1 / N });
    const analytic = model.params.map((p) => p.grad.slice());
    const h = 1e-2;
    const r = mulberry32(7);
    let worst = { name: '', rel: 0 };
    for (const [k, p] of model.params.entries()) {
      const picks = new Set<number>();
      while (picks.size < Math.min(4, p.size)) picks.add(Math.floor(r() * p.size));
      for (const i of picks) {
        const keep = p.data[i]!;
        p.data[i] = keep + h;
        const up = await lossOf(model, tokens);
        p.data[i] = keep - h;
        const down = await lossOf(model, tokens);
        p.data[i] = keep;
        const fd = (up - down) / (2 * h);
        const an = analytic[k]![i]!;
        const err = Math.abs(fd - an) / Math.max(1e-2, Math.abs(fd) + Math.abs(an));
        if (err > worst.rel) worst = { name: `${p.name}[${i}] fd ${fd} analytic ${an}`, rel: err };
      }
    }
    expect(worst.rel, worst.name).toBeLessThan(0.02);
  });

  it('gradScale scales the gradients and the hooks see every unit and parameter', async () => {
    const { model, tokens } = setup();
    const seen: string[] = [];
    const ready = new Set<string>();
    await model.forwardBackward(tokens, BATCH, {
      gradScale: 1,
      hooks: {
        beforeForward: (u) => void seen.push(`f${u}`),
        beforeBackward: (u) => void seen.push(`b${u}`),
        gradReady: (p) => void ready.add(p.name),
      },
    });
    const L = model.cfg.layers;
    expect(seen).toEqual([...Array(L + 2).keys()].map((u) => `f${u}`).concat([...Array(L + 2).keys()].reverse().map((u) => `b${u}`)));
    expect([...ready].sort()).toEqual(model.params.map((p) => p.name).sort());
    const once = model.params.map((p) => p.grad.slice());
    for (const p of model.params) p.grad.fill(0);
    await model.forwardBackward(tokens, BATCH, { gradScale: 2 });
    for (const [k, p] of model.params.entries()) for (let i = 0; i < p.size; i++) expect(p.grad[i]).toBeCloseTo(2 * once[k]![i]!, 5);
  });
});
