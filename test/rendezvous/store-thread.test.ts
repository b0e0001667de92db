import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

// A rank that hosts the job's store (rank 0 without a launcher) serves it from a
// thread of its own: a JS thread held by a blocking call or a long computation does
// not hold up the other ranks' store requests (which would wait for the rank that
// waits for them).
const run = (phase: string) => runRanks('test/fixtures/store-while-blocked.ts', 2, { args: [phase], timeoutMs: 40_000 });

describe('the store a rank hosts', () => {
  it('answers while the hosting rank\'s JS thread is held', async () => {
    const ranks = await run('held');
    expect(ranks.map((r) => r.code), describeRanks(ranks)).toEqual([0, 0]);
    const held = ranks[0]!.reports[0] as { heldMs: number };
    const peer = ranks[1]!.reports[0] as { ms: number; got: string; n: number };
    expect(held.heldMs).toBeGreaterThanOrEqual(2900);
    expect(peer.got).toBe('x');
    expect(peer.n).toBe(2);
    // Served within the 3 s hold (it began 300 ms in), not after it.
    expect(peer.ms).toBeLessThan(1500);
  }, 60_000);

  it('a peer still reading the store when rank 0 enters a blocking call: both complete', async () => {
    const ranks = await run('sync');
    expect(ranks.map((r) => r.code), describeRanks(ranks)).toEqual([0, 0]);
    for (const r of ranks) {
      const last = r.reports.find((x) => 'sum' in x) as { sum: number };
      expect(last.sum).toBe(3);
    }
    expect((ranks[1]!.reports[0] as { storeMs: number }).storeMs).toBeLessThan(1500);
  }, 60_000);
});
