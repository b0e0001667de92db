/**
 * The native side stamps calls with CLOCK_MONOTONIC in milliseconds
 * (native/core/monotonic.h): a stamp minus MONOTONIC_ORIGIN_MS is a performance.now()
 * reading, to well under a microsecond. Reading a stamp the native call left costs
 * nothing; a performance.now() call costs about 65 ns here.
 */
import { performance } from 'node:perf_hooks';

/** performance.now()'s zero on the monotonic clock (process.hrtime() reads it too), in ms. */
export const MONOTONIC_ORIGIN_MS = ((): number => {
  // The reading taken between the two closest performance.now() readings: a first
  // call of each can take microseconds.
  let best = { span: Infinity, origin: 0 };
  for (let i = 0; i < 16; i++) {
    const before = performance.now();
    const hr = process.hrtime.bigint();
    const after = performance.now();
    if (after - before < best.span) best = { span: after - before, origin: Number(hr) / 1e6 - (before + after) / 2 };
  }
  return best.origin;
})();
