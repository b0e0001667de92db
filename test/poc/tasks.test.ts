/**
 * The POC's problems and corpus: held-out pairs never reach the corpus, answers are
 * the sums, and the compact vocabulary maps every text of the POC back to itself
 * through the real cl100k_base BPE (gpt-tokenizer).
 */
import { describe, expect, it } from 'vitest';
import { encode } from 'gpt-tokenizer/encoding/cl100k_base';
import { additionProblems, corpusText, solved } from '../../src/poc/tasks.js';
import { CompactVocab } from '../../src/poc/vocab.js';

describe('POC problems, corpus and vocabulary', () => {
  const problems = additionProblems({ maxOperand: 19, seed: 3 });

  it('splits every pair once, with exact sums, and keeps held-out pairs out of the corpus', () => {
    const all = [...problems.train, ...problems.heldOut];
    expect(all).toHaveLength(400);
    expect(new Set(all.map((p) => p.prompt)).size).toBe(400);
    expect(problems.heldOut).toHaveLength(80);
    for (const p of all) {
      const [a, b] = p.prompt.slice(0, -1).split('+').map(Number);
      expect(Number(p.answer)).toBe(a! + b!);
    }
    const corpus = corpusText({ problems, bytes: 20_000, seed: 1 }).join('');
    expect(corpus.length).toBeGreaterThan(20_000 * 0.9);
    const lines = new Set(corpus.split('\n'));
    expect(problems.heldOut.filter((p) => lines.has(solved(p).trimEnd()))).toEqual([]);
    expect(problems.train.filter((p) => lines.has(solved(p).trimEnd())).length).toBeGreaterThan(100);
    expect(additionProblems({ maxOperand: 19, seed: 3 })).toEqual(problems);
  });

  it('round-trips every POC text through the compact vocabulary, and marks unknown ids', async () => {
    const docs = corpusText({ problems, bytes: 8_000, seed: 2 });
    const texts = [...docs, ...problems.heldOut.map(solved)];
    const vocab = await CompactVocab.build('cl100k_base', { texts });
    const ids = new Set(texts.flatMap((t) => encode(t)));
    expect(vocab.size).toBe(ids.size + 1);
    for (const t of texts) expect(vocab.decode(vocab.encode(t))).toBe(t);
    expect(vocab.decode(vocab.encode('zebra'))).toContain('\uFFFD');
    expect(() => additionProblems({ maxOperand: 500, seed: 1 })).toThrow(/maxOperand/);
  });
});
