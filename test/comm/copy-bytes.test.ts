/**
 * Host copies whose destination starts 1-31 bytes past the source's place in a 4 KiB
 * page run from the end (copyBytes, native/core/copy_bytes.cpp) on CPUs where a forward
 * copy there stalls on 4K aliasing (glibc's memcpy ran 10-20x slower on the Zen VM of
 * bench/README.md "Copies 1-31 bytes past their source"); elsewhere the backward path
 * cost more than memcpy and is not taken. This file's process forces it on
 * (NCCL_NODE_COPY_BACKWARD=1, set before the addon's first copy) and checks it against
 * Uint8Array's copyWithin (memmove's semantics) as the reference: every byte exact at
 * every distance, size and overlap; exactly the band of distances, from 2 KiB, on
 * x86-64, takes the backward path (hostCopyStats), a destination overlapping its source
 * from below never does; collectives whose own block goes from an input into an output
 * 16 bytes further into its page (two consecutive heap blocks) give exact results
 * through it, over shared memory and over TCP. Unset, ranks take it exactly where they
 * measured the stall, which memmove timed here confirms where that is clear either way
 * (test/helpers/aliasing.ts); a bad value fails init.
 */
import { describe, expect, it } from 'vitest';
import { io } from '../../src/checkpoint/io.js';
import { binding } from '../../src/native.js';
import { memmoveAliasingRatio, stallExpected } from '../helpers/aliasing.js';
import { describeRanks, runRanks } from '../helpers/ranks.js';

// Read once, on this process's first copy in the band: every test below but the ranks'
// runs without it sees the backward path on.
process.env.NCCL_NODE_COPY_BACKWARD = '1';

type RankReport = { rank: number; wrong: Record<string, number>; backward: number; aliasingRatio: number; copiesBackward: boolean };

const backward = (): number => binding().hostCopyStats().backwardBytes;
const x64 = process.arch === 'x64';
const fillFrom = (u: Uint8Array, seed: number): Uint8Array => u.map((_, i) => (i * 131 + seed * 17 + (i >> 9)) & 0xff);

/** One ArrayBuffer holding both sides: their distance in the page is exact whatever the buffer's own place. */
async function copyIn(store: ArrayBuffer, dstAt: number, srcAt: number, n: number): Promise<{ exact: boolean; grew: number }> {
  const all = fillFrom(new Uint8Array(store), dstAt + srcAt + n);
  const want = all.slice().copyWithin(dstAt, srcAt, srcAt + n);
  const before = backward();
  await io().ioCopy([all.subarray(dstAt, dstAt + n)], [all.subarray(srcAt, srcAt + n)]);
  const grew = backward() - before;
  return { exact: Buffer.compare(all, want) === 0, grew };
}

describe('copyBytes: host copies 1-31 bytes past their source in a page', () => {
  it('copies exactly at every distance and size, backward exactly in the band from 2 KiB on x86-64', async () => {
    const store = new ArrayBuffer(2 * 300_000 + 3 * 4096);
    const tried: string[] = [];
    for (const n of [100, 2047, 2048, 4099, 65536, 300_000]) {
      for (const apart of [0, 1, 4, 15, 16, 31, 32, 33, 64, 2048, 4064, 4095]) {
        const srcAt = 3;
        const dstAt = srcAt + Math.ceil(n / 4096) * 4096 + 4096 + apart;  // apart from the source, never overlapping
        const { exact, grew } = await copyIn(store, dstAt, srcAt, n);
        const inBand = x64 && n >= 2048 && apart >= 1 && apart <= 31;
        expect(exact, `${n} bytes, ${apart} apart`).toBe(true);
        expect(grew, `${n} bytes, ${apart} apart`).toBe(inBand ? n : 0);
        if (inBand) tried.push(`${n}/${apart}`);
      }
    }
    if (x64) expect(tried).toHaveLength(4 * 5);
  });

  it('a destination overlapping its source from above copies backward and exactly; from below forward', async () => {
    const store = new ArrayBuffer(200_000);
    for (const d of [1, 8, 16, 31]) {
      const up = await copyIn(store, 1000 + d, 1000, 65536);  // dst = src + d: memmove must copy from the end
      expect(up, `overlap from above by ${d}`).toEqual({ exact: true, grew: x64 ? 65536 : 0 });
      // dst = src - (4096 - d): the band by page distance, but a backward copy would read what it already wrote.
      const down = await copyIn(store, 10_000, 10_000 + 4096 - d, 65536);
      expect(down, `overlap from below by ${4096 - d}`).toEqual({ exact: true, grew: 0 });
    }
  });

  it('this process copies backward as NCCL_NODE_COPY_BACKWARD=1 says, whatever it measured', () => {
    const stats = binding().hostCopyStats();
    expect(stats.copiesBackward).toBe(true);
    expect(stats.aliasingRatio).toBeGreaterThan(0);
  });

  it.each([
    ['shared memory', '=1', '1', '1'],
    ['TCP', '=1', '0', '1'],
    ['shared memory', ' unset', '1', undefined],
    ['TCP', ' unset', '0', undefined],
  ])('2 ranks over %s, NCCL_NODE_COPY_BACKWARD%s: all-gathers, all-to-alls and gathers from an input into an output 16 bytes further into its page are exact', async (_name, _how, shm, forced) => {
    const here = forced === undefined ? memmoveAliasingRatio() : NaN;
    const env: Record<string, string | undefined> = { NCCL_NODE_SHM: shm, NCCL_NODE_COPY_BACKWARD: forced };
    const results = await runRanks('test/fixtures/copy-bytes.ts', 2, { env, timeoutMs: 120_000 });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual([0, 0]);
    for (const r of results.map((x) => x.reports[0] as unknown as RankReport)) {
      expect(r.wrong, `rank ${r.rank}`).toEqual({ allGather: 0, allToAll: 0, gather: 0 });
      const measured = `rank ${r.rank}: measured ${r.aliasingRatio.toFixed(2)}x`;
      expect(r.copiesBackward, measured).toBe(forced === '1' || r.aliasingRatio >= 2);
      // Each rank's own block of the all-gathers went backward (the gathers' too on the root).
      if (x64 && r.copiesBackward) expect(r.backward, measured).toBeGreaterThanOrEqual(2 * 65536);
      if (!r.copiesBackward) expect(r.backward, measured).toBe(0);
      const expected = stallExpected(here);
      if (expected !== undefined) expect(r.aliasingRatio >= 2, `${measured}, memmove here ${here.toFixed(2)}x`).toBe(expected);
    }
  });

  it.each(['yes', '2', ''])('NCCL_NODE_COPY_BACKWARD=%j fails init with ERR_INVALID_ARGUMENT', async (value) => {
    const results = await runRanks('test/fixtures/copy-bytes.ts', 1, { env: { NCCL_NODE_COPY_BACKWARD: value }, timeoutMs: 10_000 });
    expect(results[0]!.code).toBe(1);
    expect(results[0]!.stderr).toContain('ERR_INVALID_ARGUMENT');
    expect(results[0]!.stderr).toContain(`NCCL_NODE_COPY_BACKWARD must be 1 or 0, got "${value}"`);
  });
});
