/**
 * Broadcast, reduce, gather and scatter on the CPU backend at 2, 3 and 4 ranks: every
 * dtype and reduction op, every root, the root's output apart from its input, in it and
 * overlapping it, against the reference results (test/fixtures/rooted.ts). Over TCP
 * (NCCL_NODE_SHM=0, as between hosts) small calls ride in the agreement round and larger
 * ones go over the backend's own connections (beyond 2 ranks a broadcast along a chain
 * of pieces, an eighth of the buffer each: 8 at 70001 8-byte and 1.3 M float32
 * elements, or down a binomial tree where the ranks outnumber the host's cores:
 * test/comm/broadcast-tree.test.ts holds both to the reference); on one host with shared memory every call goes through the segment, small
 * ones in its agreement round, larger ones in rounds of their own. The native counters
 * show which path each call took.
 */
import { cpus } from 'node:os';
import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

type Row = { case?: string; kind?: string; n?: number; path?: string; wrong?: number; done?: boolean } & Record<string, unknown>;
const SMALL = [1, 5, 1031, 70001];
const LARGE = [1_300_007];
// Per element count and dtype: a broadcast (in place only) and a reduce, gather and scatter in each of 3 layouts.
const PER_COUNT = 1 + 3 * 3;

describe.each([['tcp', '0'], ['shared memory', '1']])('rooted collectives over %s', (_name, shm) => {
  it.each([2, 3, 4])('%i ranks: every dtype, op, root and layout matches the reference', async (size) => {
    const results = await runRanks('test/fixtures/rooted.ts', size, {
      args: [SMALL.join(','), LARGE.join(',')], env: { NCCL_NODE_SHM: shm }, timeoutMs: 150_000,
    });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
    const paths = new Set<string>();
    for (const r of results) {
      const rows = r.reports as Row[];
      expect(rows.some((x) => x.done), `rank ${r.rank} finished`).toBe(true);
      const cases = rows.filter((x) => x.case);
      expect(cases).toHaveLength((SMALL.length * 12 + LARGE.length) * PER_COUNT);
      for (const c of cases) {
        const where = `rank ${r.rank} ${c.case}`;
        expect(c.wrong, `${where} ${JSON.stringify(c)}`).toBe(0);
        paths.add(c.path!);
        if (shm === '1') expect(c.path, where).toBe('shm');
        else if (c.n! <= 5) expect(c.path, where).toBe('mesh');
        else if (LARGE.includes(c.n!)) expect(c.path, where).toBe('tcp');
        else expect(['mesh', 'tcp'], where).toContain(c.path);
      }
    }
    if (shm === '0') expect([...paths].sort()).toEqual(['mesh', 'tcp']);
  }, 180_000);
});

// Over TCP a gather rides in the agreement round up to 1 MiB a rank, and a broadcast while
// its root sends at most 1 MiB there (its buffer to each peer: 1 MiB at 2 ranks, 349525
// bytes at 4), or, with every rank on one host as here, while its buffer is at most 1 MiB,
// and where those ranks outnumber the host's cores, up to the round's capacity
// (native/gloo/gloo_agreement.cpp; large blocks read straight into the output, landBodies;
// test/shm/multinode.test.ts has the limit between hosts); a reduce and a scatter up to
// the round's capacity. One float32 more than each limit goes on the connections.
// A message of the round holds 4 MiB and 64 bytes at 2-4 ranks (MeshExchange::capacity),
// the 24-byte fingerprint first.
const ROUND_FLOATS = (4 * 1024 * 1024 + 64 - 24) / 4;
describe('rooted collectives over TCP: the round\'s limits', () => {
  it.each([
    [2, [16385, 262144, 262145], 262144],
    [4, [87382, 262144, 262145, ROUND_FLOATS, ROUND_FLOATS + 1], cpus().length < 4 ? ROUND_FLOATS : 262144],
  ])('%i ranks: %j float32, a broadcast in the round up to %i, the others as their limits say', async (size, counts, broadcastLimit) => {
    const results = await runRanks('test/fixtures/rooted.ts', size, {
      args: ['', counts.join(',')], env: { NCCL_NODE_SHM: '0' }, timeoutMs: 90_000,
    });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
    for (const r of results) {
      const cases = (r.reports as Row[]).filter((x) => x.case);
      expect(cases).toHaveLength(counts.length * PER_COUNT);
      for (const c of cases) {
        const where = `rank ${r.rank} ${c.case}`;
        expect(c.wrong, `${where} ${JSON.stringify(c)}`).toBe(0);
        const limit = c.kind === 'broadcast' ? broadcastLimit : c.kind === 'gather' ? 262144 : ROUND_FLOATS;
        expect(c.path, where).toBe(c.n! <= limit ? 'mesh' : 'tcp');
      }
    }
  }, 120_000);
});
