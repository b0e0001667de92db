/**
 * The per-call time of awaited calls as the C++ baselines take it (bench/direct_common.h):
 * each call timed from the end of the one before, so nothing between calls goes untimed.
 * Inlined instead where the call itself is sub-microsecond (bench/shm/allreduce.ts,
 * bench/comm/callpath.ts), where the closure would be part of what is measured.
 */
export async function timeBackToBack(n: number, call: () => PromiseLike<unknown>): Promise<Float64Array> {
  const us = new Float64Array(n);
  let t0 = performance.now();
  for (let i = 0; i < n; i++) {
    await call();
    const t1 = performance.now();
    us[i] = (t1 - t0) * 1000;
    t0 = t1;
  }
  return us;
}

/** timeBackToBack for blocking calls: the same timing, with no await between calls. */
export function timeBackToBackSync(n: number, call: () => unknown): Float64Array {
  const us = new Float64Array(n);
  let t0 = performance.now();
  for (let i = 0; i < n; i++) {
    call();
    const t1 = performance.now();
    us[i] = (t1 - t0) * 1000;
    t0 = t1;
  }
  return us;
}
