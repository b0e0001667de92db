/**
 * Inference: TinyLM's forward-only logits against the training forward's loss, greedy
 * decoding's stopping rules and context window.
 */
import { describe, expect, it } from 'vitest';
import { TinyLM, type TinyLMConfig } from '../../src/models/tiny-lm/model.js';
import { complete, generate } from '../../src/poc/generate.js';
import { additionProblems, corpusText, solved } from '../../src/poc/tasks.js';
import { CompactVocab } from '../../src/poc/vocab.js';

const CFG: TinyLMConfig = { vocab: 97, dim: 24, hidden: 40, layers: 3, seqLen: 10, seed: 11 };

/** Mean softmax cross-entropy of next-token logits rows against targets, in float64. */
function crossEntropy(logits: Float32Array, targets: ArrayLike<number>, V: number): number {
  let sum = 0;
  for (let t = 0; t < targets.length; t++) {
    const row = logits.subarray(t * V, (t + 1) * V);
    let max = -Infinity;
    for (const v of row) max = Math.max(max, v);
    let z = 0;
    for (const v of row) z += Math.exp(v - max);
    sum += Math.log(z) + max - row[targets[t]!]!;
  }
  return sum / targets.length;
}

describe('TinyLM forward-only inference', () => {
  it('gives logits whose cross-entropy is the loss forwardBackward returns, and leaves gradients alone', async () => {
    const model = new TinyLM(CFG);
    // Train a few steps by hand so the parameters are not the initial ones.
    for (let s = 0; s < 3; s++) {
      const rows = Int32Array.from({ length: 2 * (CFG.seqLen + 1) }, (_, i) => (i * 7 + s * 3) % CFG.vocab);
      await model.forwardBackward(rows, 2, { gradScale: 1 });
      for (const p of model.params) for (let i = 0; i < p.size; i++) p.data[i] = p.data[i]! - 0.01 * p.grad[i]!;
      for (const p of model.params) p.grad.fill(0);
    }
    for (const seed of [1, 2, 3]) {
      const seq = Int32Array.from({ length: CFG.seqLen + 1 }, (_, i) => (seed * 31 + i * i * 13) % CFG.vocab);
      const loss = await model.forwardBackward(seq, 1, { gradScale: 0 });
      const all = model.logits(seq.subarray(0, CFG.seqLen), { last: false });
      expect(all).toHaveLength(CFG.seqLen * CFG.vocab);
      expect(crossEntropy(all, seq.subarray(1), CFG.vocab)).toBeCloseTo(loss, 5);
      // The last row alone is the same numbers; a prefix's logits do not depend on what follows (causal).
      expect(model.logits(seq.subarray(0, CFG.seqLen))).toEqual(all.subarray((CFG.seqLen - 1) * CFG.vocab));
      expect(model.logits(seq.subarray(0, 4), { last: false })).toEqual(all.subarray(0, 4 * CFG.vocab));
    }
    for (const p of model.params) expect(p.grad.every((g) => g === 0)).toBe(true);
    expect(() => model.logits([])).toThrow(/1\.\.10 tokens/);
    expect(() => model.logits(new Int32Array(11))).toThrow(/received 11/);
    expect(() => model.logits([CFG.vocab])).toThrow(/id in 0\.\.96/);
  });

  it('decodes greedily: the argmax of each step, streamed, stopping at a newline or maxTokens, keeping the last seqLen tokens', async () => {
    const problems = additionProblems({ maxOperand: 9, seed: 1 });
    const vocab = await CompactVocab.build('cl100k_base', { texts: corpusText({ problems, bytes: 4000, seed: 1 }) });
    const model = new TinyLM({ ...CFG, vocab: vocab.size, seqLen: 6 });
    const prompt = '1+2=3\n4+5=9\n7+1=';
    const context = Array.from(vocab.encode(prompt));
    expect(context.length).toBeGreaterThan(6);
    const ids: number[] = [];
    const streamed: string[] = [];
    const it = generate(model, vocab, prompt, { maxTokens: 5 });
    let r = await it.next();
    while (!r.done) {
      ids.push(r.value.id);
      streamed.push(r.value.text);
      r = await it.next();
    }
    const done = r.value;
    // Reference: argmax over the last six tokens of the growing context, recomputed here.
    const expected: number[] = [];
    for (let k = 0; k < 5; k++) {
      const logits = model.logits(context.slice(-6));
      const best = logits.indexOf(Math.max(...logits));
      expected.push(best);
      context.push(best);
      if (vocab.decode([best]).includes('\n')) break;
    }
    expect(done.tokens).toEqual(expected);
    expect(done.text).toBe(streamed.join(''));
    expect(done.finish).toBe(vocab.decode(expected).includes('\n') ? 'stop' : 'length');
    // A stopping token that is only the newline streams nothing.
    expect(ids).toEqual(done.finish === 'stop' && vocab.decode(expected.slice(-1)).startsWith('\n') ? expected.slice(0, -1) : expected);

    // A model whose head always prefers the newline stops at once with an empty completion.
    const nl = vocab.encode('\n')[0]!;
    model.bOut.data.fill(0);
    model.wOut.data.fill(0);
    model.bOut.data[nl] = 1;
    expect(await complete(model, vocab, solved(problems.train[0]!).trimEnd())).toEqual({ text: '', tokens: [nl], finish: 'stop' });
    await expect(complete(model, vocab, '')).rejects.toThrow(/no tokens/);
  });
});
