/**
 * A deterministic synthetic corpus with learnable structure: each token depends
 * on the one or two before it (plus noise). Global batch `step` is the same on
 * every rank and in the single-process reference; ranks take contiguous rows.
 */
import { rng } from './kernels.js';

/** `rows` sequences of seqLen+1 tokens for global step `step`. */
export function globalBatch(step: number, rows: number, seqLen: number, vocab: number, seed: number): Int32Array {
  const out = new Int32Array(rows * (seqLen + 1));
  for (let r = 0; r < rows; r++) {
    const rand = rng(seed * 7919 + step * 104729 + r * 31);
    let a = Math.floor(rand() * vocab);
    let b = Math.floor(rand() * vocab);
    for (let t = 0; t <= seqLen; t++) {
      // Mostly a function of the previous token, sometimes of the one before: learnable in a few steps.
      const u = rand();
      const next = u < 0.15 ? Math.floor(rand() * vocab) : u < 0.3 ? (a * 5 + 2) % vocab : (b * 7 + 3) % vocab;
      out[r * (seqLen + 1) + t] = next;
      a = b;
      b = next;
    }
  }
  return out;
}

/** Rows [first, first+count) of a batch. */
export function rowsOf(batch: Int32Array, seqLen: number, first: number, count: number): Int32Array {
  return batch.subarray(first * (seqLen + 1), (first + count) * (seqLen + 1));
}
