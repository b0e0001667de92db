/**
 * Broadcasts over TCP beyond the agreement round: along the chain of pieces or down the
 * binomial tree (NCCL_NODE_TCP_BROADCAST; unset, the tree where every rank is on one host
 * and they outnumber its cores, docs/gloo.md). Both at 3, 4 and 5 ranks (5: a tree whose
 * last level is not full), every root, against the reference (test/fixtures/broadcast-tree.ts);
 * the native counter shows which path each call took. A broadcast whose size the ranks
 * disagree on (2 and 3 MiB, whole in the round where ranks outnumber cores) fails every
 * rank and the next one is right. Ranks that would take different paths fail init naming
 * the variable instead of hanging in the first broadcast.
 */
import { cpus } from 'node:os';
import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

type Row = {
  case?: string; wrong?: number; tcp?: number; tree?: number; done?: boolean; ok?: boolean; code?: string; message?: string;
  mismatch?: string; untouched?: boolean; after?: number;
};
const PER_ROOT = 3;

describe('broadcast over TCP beyond the round', () => {
  it.each([
    [3, 'chain'], [3, 'tree'], [4, 'chain'], [4, 'tree'], [5, 'chain'], [5, 'tree'], [4, ''],
  ])('%i ranks, NCCL_NODE_TCP_BROADCAST=%j: every root matches the reference on the path asked for', async (size, algo) => {
    const env: Record<string, string> = { NCCL_NODE_SHM: '0', ...(algo ? { NCCL_NODE_TCP_BROADCAST: algo } : {}) };
    const results = await runRanks<Row>('test/fixtures/broadcast-tree.ts', size, { env, timeoutMs: 90_000 });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
    // Unset: the tree where this host's online CPUs are fewer than the ranks (all on it here).
    const tree = algo ? algo === 'tree' : cpus().length < size;
    for (const r of results) {
      expect(r.reports.some((x) => x.done), `rank ${r.rank} finished`).toBe(true);
      const cases = r.reports.filter((x) => x.case);
      expect(cases).toHaveLength(size * PER_ROOT);
      for (const c of cases) {
        expect(c, `rank ${r.rank} ${c.case}`).toMatchObject({ wrong: 0, tcp: 1, tree: tree ? 1 : 0 });
      }
      expect(r.reports.find((x) => x.mismatch), `rank ${r.rank}`).toEqual({ mismatch: 'ERR_SIZE_MISMATCH', untouched: true, after: 0 });
    }
  }, 120_000);

  it('ranks asking for different paths fail init with ERR_INVALID_ARGUMENT naming both', async () => {
    const results = await runRanks<Row>('test/fixtures/gloo-tuning-rank.ts', 3, {
      env: { NCCL_NODE_SHM: '0' }, rankEnv: (rank): Record<string, string> => ({ NCCL_NODE_TCP_BROADCAST: rank === 2 ? 'tree' : 'chain' }),
      timeoutMs: 30_000,
    });
    for (const [rank, r] of results.entries()) {
      const row = r.reports[0];
      expect(row, `rank ${rank}: ${describeRanks(results)}`).toMatchObject({ ok: false, code: 'ERR_INVALID_ARGUMENT' });
      expect(row!.message).toMatch(/NCCL_NODE_TCP_BROADCAST/);
      expect(row!.message).toMatch(rank === 2 ? /rank 2 has tree, rank [01] has chain/ : new RegExp(`rank ${rank} has chain, rank 2 has tree`));
    }
  }, 60_000);

  it('a value other than chain or tree fails init naming it', async () => {
    const results = await runRanks<Row>('test/fixtures/gloo-tuning-rank.ts', 2, {
      env: { NCCL_NODE_SHM: '0', NCCL_NODE_TCP_BROADCAST: 'ring' }, timeoutMs: 30_000,
    });
    // Rank 0 hosts the store and fails first: its peers may see the store gone instead.
    expect(results[0]!.reports[0]).toMatchObject({ ok: false, code: 'ERR_INVALID_ARGUMENT' });
    expect(results[0]!.reports[0]!.message).toContain('NCCL_NODE_TCP_BROADCAST must be chain or tree, got "ring"');
    expect(results[1]!.code).not.toBe(0);
    expect(results.flatMap((r) => r.reports).filter((x) => x.ok)).toEqual([]);
  }, 60_000);
});
