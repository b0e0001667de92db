import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

// The blocking allReduceSync(): the results of the reference every rank computes,
// over shared memory and over TCP; a refusal on one rank fails the same call on the
// others (no rank waits for a call that will not come) and later calls line up.
type Row = { phase?: string; inFlightBefore?: number; settledAfter?: number; calls?: number; failures?: string[]; codes?: string[]; messages?: string[]; after?: string | number[];
  inFlight?: number; entries?: { op: string; state: string; seq: number; count: number }[]; counted?: number; heldMs?: number };

async function run(size: number, phases: string, shm: boolean): Promise<Row[][]> {
  const results = await runRanks('test/fixtures/sync-allreduce.ts', size, { args: [phases], env: { NCCL_NODE_SHM: shm ? '1' : '0' }, timeoutMs: 90_000 });
  expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
  return results.map((r) => r.reports as Row[]);
}
const phase = (rows: Row[], name: string): Row => rows.find((r) => r.phase === name)!;

describe.each([
  ['shared memory', true],
  ['TCP', false],
])('allReduceSync over %s', (_name, shm) => {
  it('3 ranks: every dtype and op, in place and into out, up to 1.2 MB, equals the reference', async () => {
    const ranks = await run(3, 'values,mismatch,record', shm);
    for (const rows of ranks) {
      const v = phase(rows, 'values');
      expect(v.failures).toEqual([]);
      expect(v.calls).toBeGreaterThan(100);
      // A disagreement fails the call on every rank alike; the next one works.
      expect(phase(rows, 'mismatch').codes).toEqual(['ERR_SIZE_MISMATCH']);
      expect(phase(rows, 'mismatch').after).toEqual([6, 6, 6, 6, 6]);
      const rec = phase(rows, 'record');
      expect(rec.entries!.map((e) => [e.op, e.state, e.count])).toEqual(Array.from({ length: 10 }, () => ['allReduce', 'completed', 3]));
      const seqs = rec.entries!.map((e) => e.seq);
      expect(seqs).toEqual(seqs.map((_, i) => seqs[0]! + i));
      expect(rec.counted).toBe(10);
    }
    // Every rank numbered the calls alike (refused and failed ones included).
    expect(new Set(ranks.map((rows) => phase(rows, 'record').entries![0]!.seq)).size).toBe(1);
  }, 120_000);

  it('calls in flight run first; a call refused on one rank fails the same call on the others', async () => {
    const ranks = await run(2, 'queued,refused', shm);
    for (const rows of ranks) {
      const q = phase(rows, 'queued');
      expect(q.failures).toEqual([]);
      expect(q.inFlightBefore).toBe(2);
      expect(q.settledAfter).toBe(2);
      expect(q.inFlight).toBe(0);
      const r = phase(rows, 'refused');
      expect(r.codes).toEqual(['ERR_SIZE_MISMATCH']);
      expect(r.after).toBe('');
    }
    // Rank 1's call was fine: it ran, and learnt rank 0's reason from the round.
    expect(phase(ranks[1]!, 'refused').messages![0]).toMatch(/rank 0 rejected its allReduce .*out/);
  }, 60_000);

  it('a peer that never calls: ERR_TIMEOUT after the call\'s timeout, not a hang', async () => {
    const [r0] = await run(2, 'timeout', shm);
    const t = phase(r0!, 'timeout');
    expect(t.codes).toEqual(['ERR_TIMEOUT']);
    expect(t.heldMs).toBeGreaterThanOrEqual(450);
    expect(t.heldMs).toBeLessThan(2500);
  }, 60_000);
});
