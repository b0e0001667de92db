import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

// All-gather and reduce-scatter through shared memory on one host: every dtype
// against the reference of test/helpers/reference.ts, in and out of place, sizes
// across several small chunks; fractional float32 reduce-scatters equal the TCP
// path's bits with the TCP path's rank-order reduce-scatter (all-to-all and a local
// reduction, picked by a tuning file: its default ring sums in ring order), and the
// counters show which path ran.
const SIZES = '1,1030,40001';

type Row = { case?: string; order?: string; digest?: string; wrong?: number; first?: string[]; done?: boolean; stats?: Record<string, number> };

async function run(size: number, shm: string): Promise<Row[][]> {
  const env: Record<string, string> = { NCCL_NODE_SHM: shm, NCCL_NODE_SHM_CHUNK: '16384' };
  if (shm === '0') {
    env.NCCL_NODE_GLOO_TUNING = join(mkdtempSync(join(tmpdir(), 'shm-gather-')), 'tuning.json');
    writeFileSync(env.NCCL_NODE_GLOO_TUNING, JSON.stringify({ reducescatter: { [size]: [{ maxBytes: null, algorithm: 'alltoall' }] } }));
  }
  const results = await runRanks('test/fixtures/shm-gather.ts', size, { args: [SIZES], env, timeoutMs: 60_000 });
  expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
  return results.map((r) => r.reports as Row[]);
}

describe('shared-memory all-gather and reduce-scatter on one host', () => {
  it('3 ranks: equal to the reference, and to the TCP path bit for bit', async () => {
    const on = await run(3, '1');
    const off = await run(3, '0');
    const calls = 3 * 12 + 3 * 2; // per size: every dtype's reduce-scatter, plus sum and avg of fractions
    for (const [rows, used] of [[on, true], [off, false]] as const) {
      for (const rank of rows) {
        const stats = rank.find((x) => x.done)!.stats!;
        expect(stats.allGathers).toBe(used ? 3 * 12 : 0);
        expect(stats.reduceScatters).toBe(used ? calls : 0);
        for (const row of rank.filter((x) => x.case)) expect(row.wrong, `${row.case} ${row.first}`).toBe(0);
      }
    }
    const digests = (rank: Row[]): string[] => rank.filter((x) => x.case || x.order).map((x) => `${x.case ?? x.order} ${x.digest}`);
    // Each rank's reduce-scatter block is its own; the same rank's bits match across paths.
    on.forEach((rank, i) => expect(digests(rank)).toEqual(digests(off[i]!)));
    const gathered = (rank: Row[]): string[] => digests(rank).filter((d) => d.startsWith('allGather'));
    for (const rank of on) expect(gathered(rank)).toEqual(gathered(on[0]!));
  }, 90_000);
});
