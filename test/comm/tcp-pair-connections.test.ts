/**
 * The TCP connections' layout (native/net/tcp_mesh.cpp, docs/gloo.md "Connecting"): one
 * connection each way per pair where the host's ranks fit its cores, one per pair
 * otherwise, NCCL_NODE_TCP_CONNECTIONS_PER_PAIR to choose. Each layout carries every
 * path exact and an abort with a round in flight reaches every peer.
 */
import { availableParallelism } from 'node:os';
import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

type Row = { rank: number; wrong: number; oneWay: number; code: string | null };

async function run(size: number, perPair?: string): Promise<Row[]> {
  const results = await runRanks('test/fixtures/tcp-pair-connections.ts', size, {
    env: { NCCL_NODE_SHM: '0', ...(perPair === undefined ? {} : { NCCL_NODE_TCP_CONNECTIONS_PER_PAIR: perPair }) },
    timeoutMs: 120_000,
  });
  expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
  return results.map((r) => r.reports[0] as Row);
}

describe('TCP connections per pair of ranks', { timeout: 150_000 }, () => {
  // The auto choice on this machine: one each way while `size` ranks fit its cores.
  it.each([
    [2, undefined],
    [3, undefined],
    [3, '1'],
    [3, '2'],
  ])('%i ranks, NCCL_NODE_TCP_CONNECTIONS_PER_PAIR=%s: every path exact, the abort seen by every peer', async (size, perPair) => {
    const rows = await run(size, perPair);
    const twoEach = perPair === '2' || (perPair === undefined && size <= availableParallelism());
    for (const r of rows) {
      expect(r.wrong, `rank ${r.rank}`).toBe(0);
      expect(r.oneWay, `rank ${r.rank}`).toBe(twoEach ? size - 1 : 0);
      if (r.rank === size - 1) expect(r.code).toBe('aborted');
      else expect(r.code, `rank ${r.rank}`).toBe('ERR_PEER_LOST');
    }
  });

  it('a bad value fails init with ERR_INVALID_ARGUMENT naming the accepted ones', async () => {
    const results = await runRanks('test/fixtures/tcp-pair-connections.ts', 1, {
      env: { NCCL_NODE_TCP_CONNECTIONS_PER_PAIR: '3' },
      timeoutMs: 10_000,
    });
    expect(results[0]!.code).toBe(1);
    expect(results[0]!.stderr).toContain('ERR_INVALID_ARGUMENT');
    expect(results[0]!.stderr).toContain('NCCL_NODE_TCP_CONNECTIONS_PER_PAIR must be 1 or 2, got "3"');
  });
});
