import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

// The all-gather and reduce-scatter algorithms the CPU backend can choose, each
// forced at every size through an NCCL_NODE_GLOO_TUNING table, at 2, 3 (not a power
// of two: halving-doubling takes its uneven path) and 4 ranks, on odd counts, against
// test/helpers/reference.ts; the native counters show the forced path ran.
// Mesh sizes stay within what the agreement round carries (a reduce-scatter's whole
// input: 1031 x 4 ranks x 8 bytes < 64 KiB).
const TABLES = {
  legacy: { allgather: 'legacy-ring', reducescatter: 'halving-doubling', sizes: [1, 5, 1031, 4099] },
  mesh: { allgather: 'mesh', reducescatter: 'mesh', sizes: [1, 5, 1031] },
} as const;

type Row = {
  case?: string; digest?: string; wrong?: number; first?: string[]; maxErr?: number; bound?: number;
  done?: boolean; gathers?: number; scatters?: number; allScatters?: number; stats?: Record<string, number>;
};

describe.each(Object.keys(TABLES) as (keyof typeof TABLES)[])('all-gather and reduce-scatter forced to %s', (name) => {
  it.each([2, 3, 4])('%i ranks: every result matches the reference, all-gathers have the same bits on every rank', async (size) => {
    const t = TABLES[name];
    const file = join(mkdtempSync(join(tmpdir(), 'gloo-coll-')), 'tuning.json');
    writeFileSync(file, JSON.stringify({
      allgather: { [size]: [{ maxBytes: null, algorithm: t.allgather }] },
      reducescatter: { [size]: [{ maxBytes: null, algorithm: t.reducescatter }] },
    }));
    const results = await runRanks<Row>('test/fixtures/gloo-coll-algos.ts', size, {
      args: [t.sizes.join(',')], env: { NCCL_NODE_GLOO_TUNING: file, NCCL_NODE_SHM: '0' }, timeoutMs: 60_000,
    });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
    const rows = results.map((r) => r.reports as Row[]);
    for (const rank of rows) {
      const done = rank.find((x) => x.done)!;
      expect(done, 'finished').toBeDefined();
      for (const row of rank.filter((x) => x.case)) {
        if (row.wrong !== undefined) expect(row.wrong, `${row.case} ${row.first?.join(', ')}`).toBe(0);
        else expect(row.maxErr!, row.case).toBeLessThanOrEqual(row.bound!);
      }
      const s = done.stats!;
      if (name === 'legacy') {
        expect(s.legacyAllGathers).toBe(done.gathers);
        expect(s.legacyReduceScatters).toBe(done.scatters);
        expect(s.meshAllGathers).toBe(0);
      } else {
        expect(s.meshAllGathers).toBe(done.gathers);
        expect(s.meshReduceScatters).toBe(done.allScatters);
        expect(s.legacyAllGathers! + s.legacyReduceScatters!).toBe(0);
      }
    }
    const gathered = rows.map((rank) => rank.filter((x) => x.case?.startsWith('allGather')).map((x) => `${x.case} ${x.digest}`));
    expect(gathered[0]!.length).toBe(t.sizes.length * 12 * 2);
    for (const d of gathered.slice(1)) expect(d).toEqual(gathered[0]);
  }, 90_000);
});
