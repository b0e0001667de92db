import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

// A rank waiting in shared memory for a late peer sleeps in a futex on the peer's
// counter, and the peer's store wakes it (native/shm/shm_segment.cpp, publish()): the
// wait ends when the data lands, not at the end of a sleep of its own length. Counted,
// not timed: rank 0's naps end by rank 1's wakes.
describe('shared-memory path: a late peer wakes the waiting rank', () => {
  it("rank 0's naps on a late rank 1 end by rank 1's wakes, with the right sums", async () => {
    const calls = 6;
    const rs = await runRanks('test/fixtures/shm-wake.ts', 2, {
      env: { NCCL_NODE_SHM: '1' }, payload: { calls, lateMs: 40 }, timeoutMs: 60_000,
    });
    const why = describeRanks(rs);
    expect(rs.map((r) => r.code), why).toEqual([0, 0]);
    const [r0, r1] = rs.map((r) => r.reports.find((x) => 'wrong' in x)!) as Array<Record<string, number>>;
    expect(r0!.wrong, why).toBe(0);
    expect(r1!.wrong, why).toBe(0);
    // Every late call went through the segment.
    expect(r0!.allReduces, why).toBe(2 * calls);
    // Rank 0 slept on every late call; a nap lasts at most 1 ms, so 40 ms of waiting
    // takes many, and the last of each wait is the one rank 1's store ends (a wake
    // that lands just between two naps is caught by the look before the next: hence
    // not every call).
    expect(r0!.naps, why).toBeGreaterThanOrEqual(2 * calls);
    expect(r0!.napsWoken, why).toBeGreaterThanOrEqual(calls);
    expect(r1!.wakes, why).toBeGreaterThanOrEqual(r0!.napsWoken!);
    console.log(`rank 0: ${r0!.naps} naps, ${r0!.napsWoken} woken; rank 1: ${r1!.wakes} wakes, ${r1!.naps} naps`);
  }, 90_000);
});
