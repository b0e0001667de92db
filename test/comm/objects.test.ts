// allGatherObject / broadcastObject on Gloo and on the NCCL stand-in, at 2 and 3
// ranks: per-rank values of different sizes, unicode, nesting, and a value JSON
// cannot encode failing the call on every rank (test/comm/objects-worker.mts).
import { describe, expect, it } from 'vitest';
import { runRanks } from '../gpu/helpers.js';

describe.each([
  ['gloo', 2], ['gloo', 3], ['nccl', 2], ['nccl', 3],
])('object exchange on %s at %i ranks', (backend, n) => {
  it('every rank gets every value, checked against each rank\'s own reference', async () => {
    const results = await runRanks(n as number, 'objects', { BACKEND: backend as string }, 60000, 'test/comm/objects-worker.mts');
    for (const r of results) {
      expect(r.result?.fatal, r.stderr).toBeUndefined();
      expect(r.code, r.stderr).toBe(0);
      expect(r.result?.backend).toBe(backend);
      expect(r.result?.failures).toEqual([]);
      expect(r.result?.cases).toBe(9);
    }
  }, 90000);
});
