import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

// The shared-memory path is on unless NCCL_NODE_SHM turns it off: unset and 1 take it,
// 0 keeps every collective on TCP (glooShmStats counts what went through a segment).
describe('NCCL_NODE_SHM', () => {
  it('unset or 1: all-reduce through a segment; 0: over TCP, with the same result', async () => {
    const cases: [string, string | undefined, number][] = [['unset', undefined, 1], ['1', '1', 1], ['0', '0', 0]];
    for (const [name, value, segments] of cases) {
      // An undefined value removes the variable from the ranks' environment.
      const env = { NCCL_NODE_SHM: value } as unknown as Record<string, string>;
      const rs = await runRanks('test/fixtures/shm-fault.ts', 2, { args: ['plain'], env, timeoutMs: 30_000 });
      expect(rs.map((r) => r.code), describeRanks(rs)).toEqual([0, 0]);
      for (const r of rs) {
        const warm = r.reports.find((x) => x.step === 'warm')!;
        expect(warm.ok, name).toBe(true);
        expect(warm.stats, name).toMatchObject({ segments, allReduces: segments, fallbacks: 0 });
      }
    }
  }, 60_000);
});
