/**
 * Reads over the backend's own TCP connections that find nothing (native/net/tcp_mesh.cpp,
 * transfer()): a socket that had nothing is read again only once poll() says it has
 * something, so a small call reads each peer's message with at most one read that finds
 * nothing. Reading every unfinished receive on every pass, as before, made 3.6-5.7 empty
 * reads a 2 KiB broadcast at 4 ranks on 2 cores (1.2-1.6 now); at 2 ranks both stay under
 * one. Checked per call over 400 broadcasts from rank 0; every element exact there, in 400
 * broadcasts with the root rotating and 400 all-reduces, and in an all-gather of 8 MiB
 * blocks (long transfers in flight both ways). A message's first read asks for its length
 * and the message this rank expects (native/gloo/mesh_exchange.cpp), so a small call reads
 * each peer's message once; what such a read takes beyond the message goes back for the
 * next read (TcpMesh::keepUnread()), checked where ranks disagree on a size.
 */
import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

type Row = { rank: number; perCall: number; readsPerCall: number; wrong: number };

describe('TCP reads that find nothing', { timeout: 120_000 }, () => {
  it.each([2, 4])('%i ranks: at most one empty read per peer a small call, every element exact', async (size) => {
    const results = await runRanks<Row>('test/fixtures/tcp-reads.ts', size, { env: { NCCL_NODE_SHM: '0' }, timeoutMs: 90_000 });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
    for (const r of results.map((x) => x.reports[0] as Row)) {
      expect(r.wrong, `rank ${r.rank}`).toBe(0);
      expect(r.perCall, `rank ${r.rank}: empty reads per call`).toBeLessThanOrEqual(size - 1);
      // A message already in the socket comes in one read, its length with it: one read with
      // data per peer, where reading the length first took two. A message caught half-sent
      // takes one more, so the bound sits between the two.
      expect(r.readsPerCall, `rank ${r.rank}: reads with data per call`).toBeGreaterThanOrEqual(size - 1);
      expect(r.readsPerCall, `rank ${r.rank}: reads with data per call`).toBeLessThanOrEqual(1.5 * (size - 1));
    }
  });
});

type Unread = { rank: number; code: string; wrong: number; unread: number };

describe('a read that takes more than its message', { timeout: 60_000 }, () => {
  // Where the ranks disagree on a broadcast's size, rank 1's read of rank 0's message asks
  // for more than it holds and, rank 1 having been stopped until rank 0's next message was
  // sent, takes the start of that message with it. Both ranks must name the disagreement, and the next
  // all-reduce, read partly from what was handed back, must be exact.
  it('2 ranks: the bytes it took beyond the message are the next read\'s, every element exact', async () => {
    const results = await runRanks<Unread>('test/fixtures/tcp-unread.ts', 2, { env: { NCCL_NODE_SHM: '0' }, timeoutMs: 45_000 });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual([0, 0]);
    const rows = results.map((x) => x.reports[0] as Unread).sort((a, b) => a.rank - b.rank);
    for (const r of rows) {
      expect(r.code, `rank ${r.rank}`).toBe('ERR_SIZE_MISMATCH');
      expect(r.wrong, `rank ${r.rank}`).toBe(0);
    }
    // The read asked for the 8-byte length, the 24-byte fingerprint and 4 KiB; rank 0's
    // broadcast message was 8 + 24 + 2 KiB, so up to 2 KiB of its all-reduce's came along.
    expect(rows[1]!.unread).toBeGreaterThan(0);
    expect(rows[1]!.unread).toBeLessThanOrEqual(2048);
  });
});
