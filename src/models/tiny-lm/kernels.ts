/**
 * The few dense kernels the example model needs, on row-major Float32Arrays.
 * Loop orders keep the innermost loop contiguous (i-k-j), which is what lets V8
 * get within a small factor of a naive C loop; no SIMD, no threads.
 */

/** y[n, o] = x[n, i] · w[i, o] + b[o]  (y is overwritten). */
export function linear(x: Float32Array, w: Float32Array, b: Float32Array | null, y: Float32Array, n: number, inDim: number, outDim: number): void {
  for (let r = 0; r < n; r++) {
    const yo = r * outDim;
    if (b) for (let o = 0; o < outDim; o++) y[yo + o] = b[o]!;
    else y.fill(0, yo, yo + outDim);
    const xo = r * inDim;
    let i = 0;
    // Four rows of w per pass: a quarter of the loads and stores of y.
    for (; i + 4 <= inDim; i += 4) {
      const x0 = x[xo + i]!, x1 = x[xo + i + 1]!, x2 = x[xo + i + 2]!, x3 = x[xo + i + 3]!;
      const w0 = i * outDim, w1 = w0 + outDim, w2 = w1 + outDim, w3 = w2 + outDim;
      for (let o = 0; o < outDim; o++) {
        y[yo + o] = y[yo + o]! + x0 * w[w0 + o]! + x1 * w[w1 + o]! + x2 * w[w2 + o]! + x3 * w[w3 + o]!;
      }
    }
    for (; i < inDim; i++) {
      const xv = x[xo + i]!;
      const wo = i * outDim;
      for (let o = 0; o < outDim; o++) y[yo + o] = y[yo + o]! + xv * w[wo + o]!;
    }
  }
}

/**
 * Backward of linear: dx = dy · wᵀ (overwritten, when dx is given),
 * dw += xᵀ · dy and db += Σ_rows dy (accumulated, as gradients are).
 */
export function linearBackward(
  x: Float32Array, w: Float32Array, dy: Float32Array,
  dx: Float32Array | null, dw: Float32Array, db: Float32Array | null,
  n: number, inDim: number, outDim: number,
): void {
  for (let r = 0; r < n; r++) {
    const yo = r * outDim;
    const xo = r * inDim;
    if (db) for (let o = 0; o < outDim; o++) db[o] = db[o]! + dy[yo + o]!;
    for (let i = 0; i < inDim; i++) {
      const wo = i * outDim;
      const xv = x[xo + i]!;
      let acc = 0;
      for (let o = 0; o < outDim; o++) {
        const g = dy[yo + o]!;
        acc += g * w[wo + o]!;
        dw[wo + o] = dw[wo + o]! + xv * g;
      }
      if (dx) dx[xo + i] = acc;
    }
  }
}

/**
 * Weight gradients a backward leaves for later (zero-bubble pipeline schedules run
 * them as a separate W pass, off the path the input gradients travel), or
 * undefined to compute them at once.
 */
export type DeferredWeightGrads = Array<() => void> | undefined;

/**
 * linearBackward, or with `later` given: the input gradient now and the weight
 * and bias gradients queued in `later` (on a copy of dy, which the caller may
 * overwrite meanwhile). Both halves keep linearBackward's summation order, so the
 * results are bit-identical either way.
 */
export function linearBackwardSplit(
  later: DeferredWeightGrads, x: Float32Array, w: Float32Array, dy: Float32Array,
  dx: Float32Array | null, dw: Float32Array, db: Float32Array | null, n: number, inDim: number, outDim: number,
): void {
  if (!later) return linearBackward(x, w, dy, dx, dw, db, n, inDim, outDim);
  if (dx) {
    for (let r = 0; r < n; r++) {
      const yo = r * outDim, xo = r * inDim;
      for (let i = 0; i < inDim; i++) {
        const wo = i * outDim;
        let acc = 0;
        for (let o = 0; o < outDim; o++) acc += dy[yo + o]! * w[wo + o]!;
        dx[xo + i] = acc;
      }
    }
  }
  const g = dy.slice();
  later.push(() => {
    for (let r = 0; r < n; r++) {
      const yo = r * outDim, xo = r * inDim;
      if (db) for (let o = 0; o < outDim; o++) db[o] = db[o]! + g[yo + o]!;
      for (let i = 0; i < inDim; i++) {
        const wo = i * outDim, xv = x[xo + i]!;
        for (let o = 0; o < outDim; o++) dw[wo + o] = dw[wo + o]! + xv * g[yo + o]!;
      }
    }
  });
}

/** Deterministic PRNG: the same seed gives the same model and data on every rank. */
export { mulberry32 as rng } from '../../util/prng.js';
