/**
 * Receives over TCP from a rank on this host land through a buffer of the backend's own
 * when the destination starts 1-31 bytes past a page's start (native/net/tcp_mesh.cpp,
 * receiveSome: there the kernel's copy out of the socket ran at half speed on CPUs that
 * stall on 4K aliasing, bench/README.md "Where a receive lands"), in a transfer that
 * receives one way. Checked:
 * in broadcasts and gathers exactly that band of destinations (3 or 4 of the 512 8-byte
 * offsets of a page, one run, as the ArrayBuffer's own place in its page is a multiple of
 * 8 or not) goes through it, in all-gathers (every rank sending as it receives) none of
 * them (bench/README.md "Straight in where a transfer also sends"); every element arrives exact at
 * every offset; NCCL_NODE_TCP_BOUNCE=0 turns it off; unset, it is on exactly where the rank
 * measured the stall (a copy 16 bytes into a page taking 2x or more one half a page in),
 * which must agree with memmove timed here where that is clear either way
 * (test/helpers/aliasing.ts); between hosts it is off (test/shm/multinode.test.ts); a bad
 * value fails init.
 */
import { describe, expect, it } from 'vitest';
import { memmoveAliasingRatio, stallExpected } from '../helpers/aliasing.js';
import { describeRanks, runRanks } from '../helpers/ranks.js';

type Coll = { bouncedAt: number[]; wrong: number; bytes: number };
type Row = { rank: number; broadcast: Coll; gather: Coll; allgather: Coll; aliasingRatio: number };

async function run(size: number, bounce?: string): Promise<Row[]> {
  const results = await runRanks<Row>('test/fixtures/tcp-bounce.ts', size, {
    env: { NCCL_NODE_SHM: '0', ...(bounce === undefined ? {} : { NCCL_NODE_TCP_BOUNCE: bounce }) },
    timeoutMs: 120_000,
  });
  expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
  return results.map((r) => r.reports[0] as unknown as Row);
}

/** The offsets are one run of 3 or 4, 8 bytes apart (going round the end of the page where the buffer starts late in one). */
function expectBand(at: number[], what: string): void {
  expect([3, 4], `${what}: ${JSON.stringify(at)}`).toContain(at.length);
  const start = at.find((o) => !at.includes((o - 8 + 4096) % 4096))!;
  expect(at.map((o) => (o - start + 4096) % 4096).sort((a, b) => a - b), what).toEqual(Array.from({ length: at.length }, (_, k) => k * 8));
}

describe('TCP receives within one host through the bounce buffer', { timeout: 180_000 }, () => {
  it.each([2, 3])('%i ranks, NCCL_NODE_TCP_BOUNCE=1: the destinations 1-31 bytes into a page bounce, every element exact', async (size) => {
    for (const r of await run(size, '1')) {
      expect(r.broadcast.wrong, `rank ${r.rank}`).toBe(0);
      expect(r.gather.wrong, `rank ${r.rank}`).toBe(0);
      expect(r.allgather.wrong, `rank ${r.rank}`).toBe(0);
      // Every rank sends its block while it receives the others': straight in at every offset.
      expect(r.allgather.bouncedAt, `rank ${r.rank} in the all-gather`).toEqual([]);
      // The root of both receives nothing of a broadcast; only it receives a gather.
      if (r.rank === 0) {
        expect(r.broadcast.bouncedAt, 'root of the broadcast').toEqual([]);
        expectBand(r.gather.bouncedAt, 'the gather\'s root');
        // Each of its peers' blocks, whole, at each of those offsets.
        expect(r.gather.bytes).toBe(r.gather.bouncedAt.length * (size - 1) * 264 * 4096);
      } else {
        expectBand(r.broadcast.bouncedAt, `rank ${r.rank} receiving the broadcast`);
        expect(r.broadcast.bytes).toBe(r.broadcast.bouncedAt.length * 264 * 4096);
        expect(r.gather.bouncedAt, `rank ${r.rank} sending to the gather`).toEqual([]);
      }
    }
  });

  it('NCCL_NODE_TCP_BOUNCE=0: nothing bounces, every element exact', async () => {
    for (const r of await run(2, '0')) {
      expect([r.broadcast, r.gather, r.allgather].map((c) => [c.wrong, c.bytes]), `rank ${r.rank}`).toEqual([[0, 0], [0, 0], [0, 0]]);
    }
  });

  it('unset: on exactly where the rank measured the 4K-aliasing stall, which memmove timed here confirms', async () => {
    const here = memmoveAliasingRatio();
    const [root, peer] = await run(2);
    for (const r of [root!, peer!]) {
      const stalls = r.aliasingRatio >= 2;
      const bounced = r.rank === 0 ? r.gather.bytes : r.broadcast.bytes;
      expect(bounced > 0, `rank ${r.rank}: measured ${r.aliasingRatio.toFixed(2)}x`).toBe(stalls);
      const expected = stallExpected(here);
      if (expected !== undefined) expect(stalls, `rank ${r.rank}: ${r.aliasingRatio.toFixed(2)}x, memmove here ${here.toFixed(2)}x`).toBe(expected);
    }
    expect(root!.gather.wrong + peer!.broadcast.wrong).toBe(0);
  });

  it.each(['yes', '2', ''])('NCCL_NODE_TCP_BOUNCE=%j fails init with ERR_INVALID_ARGUMENT', async (value) => {
    const results = await runRanks('test/fixtures/tcp-bounce.ts', 1, { env: { NCCL_NODE_TCP_BOUNCE: value }, timeoutMs: 10_000 });
    expect(results[0]!.code).toBe(1);
    expect(results[0]!.stderr).toContain('ERR_INVALID_ARGUMENT');
    expect(results[0]!.stderr).toContain(`NCCL_NODE_TCP_BOUNCE must be 1 or 0, got "${value}"`);
  });
});
