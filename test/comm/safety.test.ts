/**
 * Memory safety and lockstep on the Gloo backend: buffers detached while an
 * operation uses them, calls one rank rejects locally, mismatched calls with
 * checkCollectives off, SharedArrayBuffer memory and objects that are not memory.
 * Every rank process must exit 0; later correct calls must work on every rank.
 */
import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks, type RankResult } from '../helpers/ranks.js';

type Step = { step: string; rank: number; ok: boolean; code?: string; message?: string } & Record<string, unknown>;

async function scenario(name: string, size = 2, env: Record<string, string> = {}): Promise<RankResult[]> {
  const results = await runRanks('test/fixtures/safety.ts', size, { args: [name], env, timeoutMs: 100_000 });
  // Survival first: no rank may die of a signal, an abort or an uncaught exception.
  expect(results.map((r) => [r.code, r.signal]), describeRanks(results)).toEqual(results.map(() => [0, null]));
  for (const r of results) expect(r.reports.some((x) => x.done === true), describeRanks(results)).toBe(true);
  return results;
}

function steps(results: RankResult[], prefix: string): Step[] {
  return results.flatMap((r) => r.reports.filter((x) => String(x.step).startsWith(prefix)) as Step[]);
}

function expectHealthy(results: RankResult[], prefix = 'after'): void {
  const after = steps(results, prefix);
  expect(after.length).toBeGreaterThan(0);
  for (const s of after) expect(s.ok, `${s.step} on rank ${s.rank}: ${s.message}`).toBe(true);
}

describe('buffers detached from their ArrayBuffer', () => {
  it('a detached buffer is ERR_INVALID_ARGUMENT naming the call, the rank and "detached"', async () => {
    const results = await scenario('detachAtSubmit');
    const got = steps(results, 'submit:').filter((s) => s.step !== 'submit:recv');
    for (const s of got) {
      if (s.detached === false) continue; // this Node has no such way to detach
      expect(s.ok, s.step).toBe(false);
      expect(s.code, s.step).toBe('ERR_INVALID_ARGUMENT');
      expect(s.message).toMatch(/detached/);
      expect(s.message).toContain(`on rank ${s.rank} of 2`);
      expect(s.message).toMatch(/^(allReduce|recv|send)/);
    }
    // structuredClone and postMessage detach on every Node the package supports.
    expect(got.filter((s) => s.step === 'submit:structuredClone' || s.step === 'submit:postMessage')).toHaveLength(4);
    // A recv refused for its detached buffer fails the matching send too, instead of
    // leaving it to time out.
    const [send, recv] = [0, 1].map((r) => steps(results, 'submit:recv').find((s) => s.rank === r)!);
    expect(recv!.code).toBe('ERR_INVALID_ARGUMENT');
    expect(recv!.message).toMatch(/^recv on rank 1 of 2: buffer: .*detached/);
    expect(send!.code).toBe('ERR_INVALID_ARGUMENT');
    expect(send!.message).toMatch(/^send failed on rank 0 of 2: rank 1 rejected its matching recv/);
    expectHealthy(results);
  });

  it('detaching during a large all-reduce neither crashes nor writes freed memory', async () => {
    const results = await scenario('detachInFlight');
    for (const s of steps(results, 'inflight:')) {
      expect(s.canariesIntact, `${s.step} rank ${s.rank}`).toBe(true);
      expect(s.sumRight, `${s.step} rank ${s.rank}`).toBe(true);
      // The rank that kept its buffer gets the sum; the one that lost it is told.
      if (s.rank === 0) expect(s.ok, `${s.step}: ${s.message}`).toBe(true);
      if (s.rank === 1 && s.detached) {
        expect(s.ok, s.step).toBe(false);
        expect(s.code).toBe('ERR_INVALID_ARGUMENT');
        expect(s.message).toMatch(/detached/);
        expect(s.message).toContain('allReduce');
      }
    }
    expect(steps(results, 'inflight:structuredClone').find((s) => s.rank === 1)!.detached).toBe(true);
    expectHealthy(results);
  });

  it('detaching under a pending recv never lets the data land in later arrays', async () => {
    const results = await scenario('detachPendingRecv');
    const got = steps(results, 'pendingRecv');
    expect(got).toHaveLength(2);
    for (const s of got) expect(s.canariesIntact, `rank ${s.rank}`).toBe(true);
    const r1 = got.find((s) => s.rank === 1)!;
    expect(r1.ok).toBe(false);
    expect(r1.code).toBe('ERR_INVALID_ARGUMENT');
    expect(r1.message).toMatch(/recv failed on rank 1 of 2: .*detached/);
    expectHealthy(results);
  });
});

describe('a call one rank rejects locally', () => {
  it.each([2, 3])('fails on every rank, naming the rejecting rank, and the ranks stay in step (%i ranks)', async (size) => {
    const results = await scenario('rejectLockstep', size);
    const kinds = ['op', 'dtype', 'root', 'outSize', 'detached', 'wrongType', 'barrierOption', 'largeAllReduce'];
    for (const kind of kinds) {
      const got = steps(results, `reject:${kind}`);
      expect(got, kind).toHaveLength(size);
      for (const s of got) {
        expect(s.ok, `${kind} on rank ${s.rank}`).toBe(false);
        expect(s.message, kind).toContain(`on rank ${s.rank} of ${size}`);
        if (s.rank === 1) {
          expect(['ERR_INVALID_ARGUMENT', 'ERR_SIZE_MISMATCH'], kind).toContain(s.code);
        } else {
          // The others fail the same operation, told who rejected it and why.
          expect(s.code, `${kind}: ${s.message}`).toBe(got.find((x) => x.rank === 1)!.code);
          expect(s.message, kind).toMatch(/rank 1 rejected/);
        }
      }
      for (const s of steps(results, `after:${kind}`)) expect(s.ok, `after ${kind} on rank ${s.rank}: ${s.message}`).toBe(true);
    }
  });
});

describe('checkCollectives: false', () => {
  it.each([2, 3])('survives every mismatch at %i ranks; later calls work', async (size) => {
    const results = await scenario('unchecked', size, { SAFETY_CHECK: '0', SAFETY_TIMEOUT_MS: '15000' });
    // Mismatches that change how many bytes move are still caught before any data does.
    const caught = ['sizeLarge', 'sizeAcross', 'sizeSmall', 'dtypeWidth', 'root', 'kind', 'broadcastSize',
      'gatherSize', 'allGatherSize', 'reduceScatterSize', 'allToAllCounts', 'p2pSize'];
    for (const kind of caught) {
      const got = steps(results, `mismatch:${kind}`).filter((s) => kind !== 'p2pSize' || s.rank < 2);
      expect(got, kind).toHaveLength(kind === 'p2pSize' ? 2 : size);
      for (const s of got) {
        expect(s.ok, `${kind} on rank ${s.rank}`).toBe(false);
        expect(s.code, `${kind}: ${s.message}`).toBe('ERR_SIZE_MISMATCH');
        expect(s.message).toMatch(/expect(ed|s) /);
      }
    }
    // Same bytes, different meaning: not detected without the check, but harmless.
    for (const kind of ['dtypeSameBytes', 'op']) {
      for (const s of steps(results, `mismatch:${kind}`)) expect(s.ok, `${kind}: ${s.message}`).toBe(true);
    }
    expectHealthy(results);
  });
});

describe('memory the addon is given', () => {
  it('takes SharedArrayBuffer-backed arrays and refuses objects that are not memory', async () => {
    const results = await scenario('sharedMemory');
    for (const s of steps(results, 'sab:')) expect(s.ok, `${s.step}: ${s.message}`).toBe(true);
    const fakes = steps(results, 'fake:');
    expect(fakes).toHaveLength(6);
    for (const s of fakes) {
      expect(s.code, s.step).toBe('ERR_INVALID_ARGUMENT');
      expect(s.message).toContain(`allReduce on rank ${s.rank} of 2`);
      expect(s.message).toMatch(/expected .*received/);
    }
    expect(fakes.find((s) => s.step === 'fake:deviceLike')!.message).toMatch(/DeviceBuffer/);
    expectHealthy(results);
  });
});
