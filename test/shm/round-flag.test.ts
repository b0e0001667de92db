import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

// A segment round's flag word shares its slot with the chunks of the chunked
// collectives (shm_collectives.cpp): a chunk shorter than the word must never leave it
// reading as a later round's flag, whatever the data (test/fixtures/shm-round-flag.ts
// meets every value of the flag's low byte with a 1-byte piece).
describe('shared-memory round flags', () => {
  it('a 1-byte piece over a round\'s flag word never reads as a later round\'s flag', async () => {
    const results = await runRanks('test/fixtures/shm-round-flag.ts', 2, { timeoutMs: 60_000 });
    expect(results.flatMap((r) => r.reports.filter((x) => 'fail' in x))).toEqual([]);
    expect(results.map((r) => r.code), describeRanks(results)).toEqual([0, 0]);
    for (const r of results) {
      const done = r.reports.find((x) => x.done === true)!;
      expect(done.iterations).toBe(512);
      expect(done.wrong).toBe(0);
      // The all-to-alls went through the segment in piece rounds.
      expect((done.stats as { allToAlls: number }).allToAlls).toBe(512);
    }
  }, 90_000);
});
