// The NCCL backend keeps several ops in flight: the launcher puts the second
// all-reduce on the stream while the first still runs (each takes RUN_US on the
// stand-in's stream), and the watchdog completes them in order.
import { describe, expect, it } from 'vitest';
import { runRanks } from './helpers.js';

const RUN_US = 400_000;

describe('nccl ops in flight together', () => {
  it('the second all-reduce is launched before the first completes', async () => {
    const results = await runRanks(2, 'overlap', {
      NCCL_STANDIN_RUN_US: String(RUN_US), NCCL_STANDIN_LAUNCH_DELAY_US: '2000',
    }, 60000, 'test/gpu/overlap-worker.mts');
    for (const r of results) {
      expect(r.result?.fatal, r.stderr).toBeUndefined();
      expect(r.code, r.stderr).toBe(0);
      expect(r.result?.results).toEqual(r.result?.expected);
      const [first, second] = r.result?.entries as { state: string; startedUs: number; endedUs: number }[];
      expect([first!.state, second!.state]).toEqual(['completed', 'completed']);
      // Both launched before the first completed, which took (at least) its run time.
      expect(first!.endedUs - first!.startedUs).toBeGreaterThanOrEqual(RUN_US * 0.9);
      expect(first!.startedUs).toBeLessThan(first!.endedUs);
      expect(second!.startedUs).toBeLessThan(first!.endedUs);
      // The stream runs them one after the other: the second ends a run time later.
      expect(second!.endedUs - first!.endedUs).toBeGreaterThanOrEqual(RUN_US * 0.9);
    }
  }, 90000);
});
