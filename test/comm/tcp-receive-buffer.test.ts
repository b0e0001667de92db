/**
 * The receive buffer of TCP connections within one host (native/net/tcp_mesh.cpp,
 * sizeReceiveBuffer; docs/gloo.md "Connecting"): fixed at NCCL_NODE_TCP_RCVBUF (4 MiB by
 * default; 0 leaves it to the kernel's autotuning), checked against the kernel's own
 * account of each socket (`ss`, whose `rb` is the buffer the kernel holds for it: twice
 * the request, capped at twice net.core.rmem_max). Between hosts the autotuning stays
 * (test/shm/multinode.test.ts).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

type Socket = { local: string; peer: string; rb: number };
type Row = { rank: number; sockets: Socket[]; sized: number; oneWay: number; storePort: number; wrong: number };

const rmemMax = Number(readFileSync('/proc/sys/net/core/rmem_max', 'utf8'));
const held = (requested: number): number => 2 * Math.min(requested, rmemMax);

async function run(size: number, rcvbuf?: string): Promise<Row[]> {
  const results = await runRanks<Row>('test/fixtures/tcp-receive-buffer.ts', size, {
    env: { NCCL_NODE_SHM: '0', ...(rcvbuf === undefined ? {} : { NCCL_NODE_TCP_RCVBUF: rcvbuf }) },
    timeoutMs: 60_000,
  });
  expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
  return results.map((r) => r.reports[0] as Row);
}

describe('the receive buffer of TCP connections within one host', { timeout: 90_000 }, () => {
  it.each([
    [2, undefined, 4 << 20],
    [3, undefined, 4 << 20],
    [2, '1048576', 1 << 20],
  ])('%i ranks, NCCL_NODE_TCP_RCVBUF=%s: every connection between ranks holds %i bytes requested, as the kernel reports', async (size, rcvbuf, requested) => {
    for (const r of await run(size, rcvbuf)) {
      expect(r.wrong, `rank ${r.rank}`).toBe(0);
      // Connections to peers: one per peer, two with a peer connected one each way.
      const connections = (size - 1) + r.oneWay;
      expect(r.sized, `rank ${r.rank}`).toBe(connections);
      const fixed = r.sockets.filter((s) => s.rb === held(requested));
      expect(fixed, `rank ${r.rank}: ${JSON.stringify(r.sockets)}`).toHaveLength(connections);
      // None of them is the store's (its connections keep the kernel's buffer).
      for (const s of fixed) expect([s.local, s.peer]).not.toContain(`127.0.0.1:${r.storePort}`);
    }
  });

  it('NCCL_NODE_TCP_RCVBUF=0 leaves every buffer to the kernel', async () => {
    for (const r of await run(2, '0')) {
      expect(r.wrong, `rank ${r.rank}`).toBe(0);
      expect(r.sized, `rank ${r.rank}`).toBe(0);
      expect(r.sockets.length, `rank ${r.rank}`).toBeGreaterThan(0);
      expect(r.sockets.filter((s) => s.rb === held(4 << 20)), JSON.stringify(r.sockets)).toEqual([]);
    }
  });

  it.each(['4M', '-1', '67108865', ''])('NCCL_NODE_TCP_RCVBUF=%j fails init with ERR_INVALID_ARGUMENT naming the range', async (value) => {
    // One rank: the check is the backend's, before any connection.
    const results = await runRanks('test/fixtures/tcp-receive-buffer.ts', 1, {
      env: { NCCL_NODE_TCP_RCVBUF: value },
      timeoutMs: 10_000,
    });
    expect(results[0]!.code).toBe(1);
    expect(results[0]!.stderr).toContain('ERR_INVALID_ARGUMENT');
    expect(results[0]!.stderr).toContain(`NCCL_NODE_TCP_RCVBUF must be a byte count from 0 (the kernel's default) to 67108864, got "${value}"`);
  });
});
