import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks, type RankResult } from '../helpers/ranks.js';

// The shared-memory all-reduce within one host: every dtype against the reference
// test/helpers/reference.ts computes, sizes from one element to several chunks
// (NCCL_NODE_SHM_CHUNK makes chunks small so the sizes are not multiples of it),
// fractional floats bit for bit against a fold in rank order, identical bits on
// every rank, and the same integer results as the TCP path (NCCL_NODE_SHM=0).
const SIZES = [1, 1031, 70001];
const CHUNK = '65536';

type Row = {
  case?: string; order?: string; digest?: string; wrong?: number; first?: string[];
  done?: boolean; stats?: Record<string, number>;
};

async function run(size: number, env: Record<string, string>, orderSizes = '70001'): Promise<Row[][]> {
  const results: RankResult[] = await runRanks('test/fixtures/shm-allreduce.ts', size, {
    args: [SIZES.join(','), orderSizes],
    env,
    timeoutMs: 60_000,
  });
  expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
  return results.map((r) => r.reports as Row[]);
}

function digests(rank: Row[], key: 'case' | 'order'): string[] {
  return rank.filter((x) => x[key]).map((x) => `${x[key]} ${x.digest}`);
}

describe('shared-memory all-reduce on one host', () => {
  const tcp: Record<number, Row[][]> = {};

  it.each([2, 3, 4])('%i ranks: every dtype equals the reference, floats equal the rank-order fold', async (size) => {
    const rows = await run(size, { NCCL_NODE_SHM: '1', NCCL_NODE_SHM_CHUNK: CHUNK }, size === 3 ? '70001,1048583' : '70001');
    for (const rank of rows) {
      const done = rank.find((x) => x.done);
      expect(done?.done).toBe(true);
      // The path was taken: every all-reduce above the one-round mesh size went through it.
      const big = rank.filter((x) => (x.case ?? x.order ?? '').match(/n=(70001|1048583)\//) || x.order).length;
      expect(done!.stats!.allReduces).toBeGreaterThanOrEqual(big);
      expect(done!.stats!.segments).toBe(1);
      expect(done!.stats!.twoLevel).toBe(0);
      for (const row of rank.filter((x) => x.case || x.order)) expect(row.wrong, `${row.case ?? row.order} ${row.first}`).toBe(0);
    }
    for (const rank of rows.slice(1)) {
      expect(digests(rank, 'case')).toEqual(digests(rows[0]!, 'case'));
      expect(digests(rank, 'order')).toEqual(digests(rows[0]!, 'order'));
    }
    if (size === 3) tcp[3] = rows;
  }, 90_000);

  it('NCCL_NODE_SHM=0: the TCP path gives the same integer and exact results, and never the shared-memory path', async () => {
    const rows = await run(3, { NCCL_NODE_SHM: '0' }, '0');
    for (const rank of rows) {
      const done = rank.find((x) => x.done)!;
      expect(done.stats).toMatchObject({ allReduces: 0, segments: 0 });
      for (const row of rank.filter((x) => x.case)) expect(row.wrong, row.case).toBe(0);
    }
    // Small-integer inputs: every dtype's sums are exact, so the bits match across paths.
    if (tcp[3]) expect(digests(rows[0]!, 'case')).toEqual(digests(tcp[3][0]!, 'case'));
  }, 90_000);
});
