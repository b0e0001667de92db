/** Comparisons of training runs' parameters (ranks run through test/helpers/ranks.ts). */
/** Largest |a-b| relative to the largest |b|, over concatenated arrays. */
export function maxRelDiff(a: Float32Array, b: Float32Array): number {
  if (a.length !== b.length) throw new Error(`length ${a.length} vs ${b.length}`);
  let diff = 0, scale = 0;
  for (let i = 0; i < a.length; i++) {
    diff = Math.max(diff, Math.abs(a[i]! - b[i]!));
    scale = Math.max(scale, Math.abs(b[i]!));
  }
  return diff / scale;
}

export function concat(arrays: Float32Array[]): Float32Array {
  const out = new Float32Array(arrays.reduce((a, x) => a + x.length, 0));
  let off = 0;
  for (const a of arrays) {
    out.set(a, off);
    off += a.length;
  }
  return out;
}
