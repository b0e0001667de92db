/**
 * An independent look at the 4K-aliasing stall the addon measures for itself
 * (hostCopyStats().aliasingRatio, native/core/copy_bytes.cpp): 64 KiB copied with
 * TypedArray.set (V8's memmove, glibc's choice of copy) to 16 bytes past the source's place
 * in its page, against half a page past it, the best of 200 tries each. Distances only, so
 * the ArrayBuffer's own place in its page does not matter.
 */
export function memmoveAliasingRatio(): number {
  const n = 65536;
  const u = new Uint8Array(3 * n + 4 * 4096);
  const src = u.subarray(0, n);
  const best = (dstAt: number): number => {
    const dst = u.subarray(dstAt, dstAt + n);
    let b = Infinity;
    for (let i = 0; i < 200; i++) {
      const t = process.hrtime.bigint();
      dst.set(src);
      b = Math.min(b, Number(process.hrtime.bigint() - t));
    }
    return b;
  };
  best(n + 4096 + 16);  // warm both destinations' pages and the copy path first
  best(2 * n + 8192 + 2048);
  return best(n + 4096 + 16) / best(2 * n + 8192 + 2048);
}

/**
 * Whether the addon must find the stall, given the ratio measured here: true where memmove
 * took 4x or more (the stalling CPUs measured 15x), false at 1.6x or less (1.1-1.3x where
 * it does not stall), undefined between, where only the addon's own measurement decides.
 */
export function stallExpected(memmoveRatio: number): boolean | undefined {
  if (memmoveRatio >= 4) return true;
  if (memmoveRatio <= 1.6) return false;
  return undefined;
}
