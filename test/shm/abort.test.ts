import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

// A rank that aborts its communicator right after a collective returned: over TCP the
// others' part of that collective still completes (every message had arrived; only
// the connections close afterwards) and their next call fails at once. The shared-
// memory path must behave the same (NCCL_NODE_SHM=0 is the reference, run here too):
// a wait whose counter is already there completes even on a segment marked failed,
// and a call entered on such a segment fails at once. Rank 1 comes late to each
// trial's call so that ranks 0 and 2 sleep in the same wait and wake in either order:
// rank 0 can return and abort while rank 2 is still asleep.
type Trial = { trial: number; first: { ok: boolean; code?: string }; next?: { ok: boolean; code?: string; ms?: number } };

const TRIALS = 24;

describe('shared-memory path: a rank aborting after a collective', () => {
  it('the others complete that collective and fail their next call at once, as over TCP', async () => {
    const seen: Record<string, { first: string[]; next: string[] }> = {};
    for (const shm of ['0', '1']) {
      const rs = await runRanks('test/shm/abort-rank.ts', 3, { env: { NCCL_NODE_SHM: shm }, payload: { trials: TRIALS, lateMs: 30 }, timeoutMs: 50_000 });
      const why = describeRanks(rs);
      expect(rs.map((r) => r.code), why).toEqual([0, 0, 0]);
      const trials = rs.map((r) => r.reports.filter((x) => 'trial' in x) as Trial[]);
      for (const t of trials) expect(t, why).toHaveLength(TRIALS);
      const stats = rs[0]!.reports.find((x) => 'stats' in x)!.stats as { allReduces: number };
      // The trials' all-reduces went through the split communicators' segments.
      if (shm === '1') expect(stats.allReduces).toBeGreaterThanOrEqual(TRIALS);
      else expect(stats.allReduces).toBe(0);
      seen[shm] = {
        first: trials.flatMap((t, r) => t.map((x) => `rank ${r} trial ${x.trial}: ${x.first.ok ? 'ok' : x.first.code}`)),
        next: trials.slice(1).flatMap((t, r) => t.map((x) => `rank ${r + 1} trial ${x.trial}: ${x.next!.ok ? 'ok' : x.next!.code}`)),
      };
      for (const x of trials.slice(1).flat()) expect(x.next!.ms!, `${shm}: ${x.next!.code}`).toBeLessThan(1000); // deadline 20 s
      console.log(`NCCL_NODE_SHM=${shm}: next call failed after ${trials.slice(1).flat().map((x) => x.next!.ms!.toFixed(1)).join(' ')} ms`);
    }
    expect(seen['0']!.first.every((s) => s.endsWith('ok')), seen['0']!.first.join('\n')).toBe(true);
    expect(seen['1']!.first).toEqual(seen['0']!.first);
    expect(seen['1']!.next).toEqual(seen['0']!.next);
    expect(seen['0']!.next.every((s) => s.endsWith('ERR_PEER_LOST')), seen['0']!.next.join('\n')).toBe(true);
  }, 150_000);
});
