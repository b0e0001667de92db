import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

// Every all-reduce algorithm the CPU backend can be forced to, at 2 ranks and at 3
// (not a power of two: halving-doubling and bcube take their uneven paths), in
// sizes below and above the one-round mesh path, against a float64 reference and
// with the same bits on every rank.
const ALGOS = ['ring', 'bcube', 'legacy-ring', 'ring-chunked', 'halving-doubling', 'legacy-bcube'];
const SIZES = [1, 5, 1031, 70001];

type Row = { case?: string; digest?: string; maxErr?: number; bound?: number; wrong?: number; done?: boolean };

describe.each(ALGOS)('NCCL_NODE_GLOO_ALLREDUCE=%s', (algo) => {
  it.each([2, 3])('%i ranks: within float rounding of the reference, identical bits on every rank', async (size) => {
    const results = await runRanks<Row>('test/fixtures/gloo-algos.ts', size, {
      args: [SIZES.join(',')],
      env: { NCCL_NODE_GLOO_ALLREDUCE: algo },
      timeoutMs: 60_000,
    });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
    const rows = results.map((r) => r.reports as Row[]);
    for (const rank of rows) {
      expect(rank.find((x) => x.done)?.done).toBe(true);
      for (const row of rank.filter((x) => x.case)) {
        if (row.wrong !== undefined) expect(row.wrong, row.case).toBe(0);
        else expect(row.maxErr!, row.case).toBeLessThanOrEqual(row.bound!);
      }
    }
    const digests = rows.map((rank) => rank.filter((x) => x.case).map((x) => `${x.case} ${x.digest}`));
    expect(digests[0]!.length).toBe(SIZES.length * 14);
    for (const d of digests.slice(1)) expect(d).toEqual(digests[0]);
  }, 90_000);
});

describe('an unknown NCCL_NODE_GLOO_ALLREDUCE', () => {
  // Rank 0 fails at once; its peers lose the store rank 0 hosted and never succeed.
  it('fails init with ERR_INVALID_ARGUMENT naming the accepted values', async () => {
    const results = await runRanks<Row>('test/fixtures/gloo-algos.ts', 2, {
      args: ['1'],
      env: { NCCL_NODE_GLOO_ALLREDUCE: 'fastest' },
      timeoutMs: 10_000,
    });
    expect(results[0]!.code).toBe(1);
    expect(results[0]!.stderr).toContain('ERR_INVALID_ARGUMENT');
    expect(results[0]!.stderr).toMatch(/must be one of .*halving-doubling.*got "fastest"/);
    expect(results[1]!.code).not.toBe(0);
    expect(results.flatMap((r) => r.reports)).toEqual([]);
  }, 30_000);
});

describe('a bad NCCL_NODE_TCP_RCVLOWAT', () => {
  // One rank: the check is the backend's, before any connection; at two, rank 1 would
  // wait out its timeout for the store rank 0 hosted.
  it.each(['256K', '-1', '67108865', ''])('%j fails init with ERR_INVALID_ARGUMENT naming the range', async (value) => {
    const results = await runRanks<Row>('test/fixtures/gloo-algos.ts', 1, {
      args: ['1'],
      env: { NCCL_NODE_TCP_RCVLOWAT: value },
      timeoutMs: 10_000,
    });
    expect(results[0]!.code).toBe(1);
    expect(results[0]!.stderr).toContain('ERR_INVALID_ARGUMENT');
    expect(results[0]!.stderr).toContain(`NCCL_NODE_TCP_RCVLOWAT must be a byte count from 0 (the kernel's default) to 67108864, got "${value}"`);
    expect(results[0]!.reports).toEqual([]);
  }, 30_000);

  it('67108864 (the largest) runs the fixture exact', async () => {
    const results = await runRanks<Row>('test/fixtures/gloo-algos.ts', 2, {
      args: ['70001'],
      env: { NCCL_NODE_TCP_RCVLOWAT: String(64 * 1024 * 1024), NCCL_NODE_SHM: '0' },
      timeoutMs: 60_000,
    });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual([0, 0]);
    for (const row of results.flatMap((r) => r.reports as Row[]).filter((x) => x.case)) {
      if (row.wrong !== undefined) expect(row.wrong, row.case).toBe(0);
      else expect(row.maxErr!, row.case).toBeLessThanOrEqual(row.bound!);
    }
  }, 90_000);
});
