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
      expect(r.result?.outcomes).toEqual(['ok', 'ok']);
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

  it('a timeout fails the op at fault with the flight record and the op queued behind it as aborted', async () => {
    // Rank 1 stops moving data in its first all-reduce; the second is already on the
    // stream. Rank 0's deadline is shorter, so rank 0 is the one that times out.
    const results = await runRanks(2, 'overlap', {
      NCCL_STANDIN_FAULT: 'hang:AllReduce:1:1', OP_TIMEOUT_MS_RANK0: '1500', OP_TIMEOUT_MS_RANK1: '5000',
    }, 60000, 'test/gpu/overlap-worker.mts');
    for (const r of results) {
      expect(r.result?.fatal, r.stderr).toBeUndefined();
      const [first, second] = r.result?.outcomes as { code: string; message: string }[];
      // Rank 1 times out too, or first hears of rank 0's abort (ncclRemoteError).
      expect(r.rank === 0 ? ['ERR_TIMEOUT'] : ['ERR_TIMEOUT', 'ERR_NCCL']).toContain(first!.code);
      expect(first!.message).toMatch(/flight record: .*nccl-node-fr-rank/);
      expect(second!.code).toBe('ERR_COMM_ABORTED');
      expect(second!.message).toMatch(/after another operation failed: /);
      expect(r.result?.state).toBe('broken');
      const entries = r.result?.entries as { op: string; state: string; startedUs: number }[];
      expect(entries.map((e) => e.state)).toEqual([r.rank === 0 || first!.code === 'ERR_TIMEOUT' ? 'timeout' : 'failed', 'aborted']);
      // Both were on the stream when the watchdog gave up.
      expect(entries.every((e) => e.startedUs > 0)).toBe(true);
    }
  }, 90000);
});
