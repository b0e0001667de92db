/**
 * The CPU backend's own TCP connections (native/net/) between ranks of different hosts
 * (here NCCL_NODE_SHM=0 puts ranks of one host on them too): the ring all-reduce on
 * every dtype and op against test/helpers/reference.ts, with the same bits on every
 * rank, and the faults that matter on a byte stream: a peer killed in the middle of a
 * 64 MiB ring, a peer that never joins, an abort while peers wait.
 * All-gather and reduce-scatter on the ring: test/comm/gloo-coll-algos.test.ts.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks, type RankResult } from '../helpers/ranks.js';

type Row = { case?: string; digest?: string; wrong?: number; first?: string[]; done?: boolean; calls?: number; stats?: Record<string, number> };
type Step = { step: string; rank: number; ok: boolean; code?: string; message?: string; ms?: number };

const TCP = { NCCL_NODE_SHM: '0' };

describe('all-reduce on the own TCP ring', () => {
  it.each([2, 3, 4])('%i ranks: every dtype and op matches the reference, same bits on every rank', async (size) => {
    // Forced at every size, so 1 and 5 elements (ranks with empty blocks) take the ring too.
    const file = join(mkdtempSync(join(tmpdir(), 'tcp-ring-')), 'tuning.json');
    writeFileSync(file, JSON.stringify({ allreduce: { [size]: [{ maxBytes: null, algorithm: 'tcp-ring' }] } }));
    const results = await runRanks<Row>('test/fixtures/tcp-ring-allreduce.ts', size, {
      args: ['1,5,1031', '3000001'], env: { ...TCP, NCCL_NODE_GLOO_TUNING: file }, timeoutMs: 120_000,
    });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
    const rows = results.map((r) => r.reports as Row[]);
    for (const rank of rows) {
      const done = rank.find((x) => x.done)!;
      expect(done, 'finished').toBeDefined();
      const cases = rank.filter((x) => x.case);
      expect(cases).toHaveLength(3 * 12 * 5 + 1);
      for (const row of cases) expect(row.wrong, `${row.case} ${row.first?.join(', ')}`).toBe(0);
      expect(done.stats!.tcpRingCalls).toBe(done.calls);
      expect(done.stats!.meshAllReduces).toBe(0);
    }
    const digests = rows.map((rank) => rank.filter((x) => x.case).map((x) => `${x.case} ${x.digest}`));
    for (const d of digests.slice(1)) expect(d).toEqual(digests[0]);
  }, 180_000);
});

describe('leaving without destroy()', () => {
  // exit: the process ends; terminate: the worker thread holding the communicator is
  // terminated, so the addon's environment teardown closes it while the process lives on.
  it.each(['exit', 'terminate'])('%s: a rank that leaves right after its last all-reduce does not fail a peer still reading that round', async (how) => {
    const results = await runRanks('test/fixtures/tcp-exit.ts', 2, { args: [how], env: TCP, timeoutMs: 30_000 });
    for (const r of results) expect(r.code, describeRanks(results)).toBe(0);
    const rows = results.flatMap((r) => r.reports as { rank: number; step?: string; ok: boolean; sum?: number; code?: string; ms?: number; message?: string }[]);
    const last = rows.filter((r) => !r.step);
    expect(last).toHaveLength(2);
    for (const row of last) expect(row, row.message).toMatchObject({ ok: true, sum: 3 });
    // The peer's next call sees the departure at once (with terminate, rank 0's process
    // lives on for 6 s: connections left open would hold the call that long).
    const next = rows.find((r) => r.step === 'next');
    expect(next).toMatchObject({ ok: false, code: 'ERR_PEER_LOST' });
    expect(next!.ms).toBeLessThan(2000);
  }, 60_000);
});

async function scenario(name: string, size: number, env: Record<string, string> = {}): Promise<RankResult[]> {
  return runRanks('test/fixtures/scenario.ts', size, { args: [name], env: { ...TCP, ...env }, timeoutMs: 60_000 });
}

function steps(results: RankResult[], step: string): Step[] {
  return results.flatMap((r) => r.reports.filter((x) => x.step === step) as Step[]);
}

describe.each([2, 4])('faults on the own TCP connections, %i ranks', (size) => {
  it('a peer killed in the middle of a 64 MiB ring all-reduce: survivors fail with ERR_PEER_LOST, then stay failed', async () => {
    const results = await scenario('peerKilled', size);
    expect(results.find((r) => r.rank === 1)!.signal).toBe('SIGKILL');
    for (const r of results.filter((x) => x.rank !== 1)) expect(r.code, describeRanks(results)).toBe(0);
    const survivors = steps(results, 'survivor');
    expect(survivors).toHaveLength(size - 1);
    for (const s of survivors) {
      expect(['ERR_PEER_LOST', 'ERR_TIMEOUT']).toContain(s.code);
      expect(s.ms!).toBeLessThan(30_000);
    }
    // The ring's neighbour of the killed rank sees its connection drop at once.
    expect(survivors.some((s) => s.code === 'ERR_PEER_LOST')).toBe(true);
    for (const s of steps(results, 'afterFailure')) expect(['ERR_COMM_ABORTED', 'ERR_PEER_LOST']).toContain(s.code);
  });

  it('a peer that never joins: the call times out at its own deadline', async () => {
    const results = await scenario('stalled', size);
    for (const r of results) expect(r.code, describeRanks(results)).toBe(0);
    const calls = steps(results, 'perCall');
    expect(calls).toHaveLength(size - 1);
    expect(calls.some((s) => s.code === 'ERR_TIMEOUT')).toBe(true);
    for (const s of calls) {
      expect(['ERR_TIMEOUT', 'ERR_PEER_LOST']).toContain(s.code);
      if (s.code === 'ERR_TIMEOUT') {
        expect(s.ms!).toBeGreaterThanOrEqual(900);
        expect(s.message).toContain('1000 ms');
      }
      expect(s.ms!).toBeLessThan(5000);
    }
  });

  it('abort() fails pending work at once and the peers see the loss', async () => {
    const results = await scenario('abort', size);
    for (const r of results) expect(r.code, describeRanks(results)).toBe(0);
    const pending = steps(results, 'pending');
    expect(pending).toHaveLength(1);
    expect(pending[0]!.code).toBe('ERR_COMM_ABORTED');
    expect(pending[0]!.ms!).toBeLessThan(5000);
    // Rank 1 calls an all-reduce where the others had posted an all-gather. A byte
    // stream delivers what was sent before the connection closed, so rank 1 and the
    // bystanders may hold every message of that round, rank 0's included; rank 0's
    // urgent byte still tells them it aborted: the loss, never the disagreement.
    const peer = steps(results, 'peer');
    expect(peer).toHaveLength(1);
    for (const s of [...steps(results, 'bystander'), ...peer]) {
      expect(['ERR_PEER_LOST', 'ERR_TIMEOUT'], s.message).toContain(s.code);
      expect(s.ms!).toBeLessThan(10_000);
    }
  });
});
