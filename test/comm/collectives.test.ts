import { describe, expect, it } from 'vitest';
import { DTYPES, REDUCE_OPS } from '../../src/index.js';
import { describeRanks, runRanks } from '../helpers/ranks.js';

// Per size and dtype: 4 reductions x 5 ops x 4 checks-ish, plus 6 movement checks.
const CHECKS_PER_DTYPE = REDUCE_OPS.length * 6 + 6;

// 1031 elements take the one-round path for small all-reduces in every dtype, 20000
// take it only up to 2-byte dtypes and Gloo's ring beyond; 16 MiB is a float32 sum.
describe.each([
  [1, true], [2, true], [4, true], [2, false],
])('every collective x dtype x op at %i ranks (checkCollectives %s)', (size, check) => {
  it('matches the locally computed reference, 1 element to 16 MiB', async () => {
    const sizes = check ? [1, 3, 1031, 20000] : [1, 1031, 20000];
    const results = await runRanks('test/fixtures/collectives.ts', size, {
      args: [sizes.join(','), String(check ? 16 << 20 : 0)],
      env: { FIXTURE_CHECK: check ? '1' : '0' },
      timeoutMs: 240_000,
    });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
    const failures = results.flatMap((r) => r.reports.filter((x) => 'fail' in x));
    expect(failures).toEqual([]);
    for (const r of results) {
      const done = r.reports.find((x) => x.done === true);
      expect(done, `rank ${r.rank} did not finish`).toBeDefined();
      // Every case ran: at least the reductions and movements of every dtype and size.
      expect(Number(done!.cases)).toBeGreaterThanOrEqual(sizes.length * DTYPES.length * (CHECKS_PER_DTYPE - 7));
    }
  }, 300_000);
});
