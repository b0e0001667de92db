/**
 * Reads over the backend's own TCP connections that find nothing (native/net/tcp_mesh.cpp,
 * transfer()): a socket that had nothing is read again only once poll() says it has
 * something, so a small call reads each peer's message with at most one read that finds
 * nothing. Reading every unfinished receive on every pass, as before, made 3.6-5.7 empty
 * reads a 2 KiB broadcast at 4 ranks on 2 cores (1.2-1.6 now); at 2 ranks both stay under
 * one. Checked per call over 400 broadcasts from rank 0; every element exact there, in 400
 * broadcasts with the root rotating and 400 all-reduces, and in an all-gather of 8 MiB
 * blocks (long transfers in flight both ways).
 */
import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

type Row = { rank: number; perCall: number; wrong: number };

describe('TCP reads that find nothing', { timeout: 120_000 }, () => {
  it.each([2, 4])('%i ranks: at most one empty read per peer a small call, every element exact', async (size) => {
    const results = await runRanks<Row>('test/fixtures/tcp-reads.ts', size, { env: { NCCL_NODE_SHM: '0' }, timeoutMs: 90_000 });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
    for (const r of results.map((x) => x.reports[0] as Row)) {
      expect(r.wrong, `rank ${r.rank}`).toBe(0);
      expect(r.perCall, `rank ${r.rank}: empty reads per call`).toBeLessThanOrEqual(size - 1);
    }
  });
});
