import { describe, expect, it } from 'vitest';
import { phaseOf as phase, runPhases } from '../helpers/phases.js';

// Small all-reduces and barriers complete on the calling thread when the peers' parts
// arrive within a short bound, else on the worker: between ranks of one host through
// the shared-memory segment (gloo_shm.cpp, finishOnCaller: a poll of the segment), and
// over TCP (gloo_agreement.cpp, finishTcpOnCaller: a wait in poll() on the round's
// sockets, whose progress the worker takes over when the bound passes). Both ways must
// give the reference's results, the same verdicts, and never hold the JS thread beyond
// the bound.
type Row = { phase?: string; calls?: number; wrong?: number; failures?: string[]; heldMs?: number; onCaller?: number; onCallerBeyond?: number; codes?: string[]; after?: number[]; done?: boolean;
  lateHeldMs?: number[]; restoredHeldMs?: number; failMs?: number[]; twoRounds?: number; toWorker?: number; afterOk?: boolean };
type DeathRow = Omit<Row, 'heldMs'> & { heldMs?: number[] };

const PATHS = [
  ['shared memory', { NCCL_NODE_SHM: '1' }, 'NCCL_NODE_SHM_CALLER_SPIN_US'],
  ['TCP', { NCCL_NODE_SHM: '0' }, 'NCCL_NODE_TCP_CALLER_WAIT_US'],
] as const;

describe.each(PATHS)('small calls completed on the calling thread (%s)', (_path, pathEnv, boundVar) => {
  const run = (size: number, phases: string, env: Record<string, string> = {}): Promise<Row[][]> =>
    runPhases('test/fixtures/caller.ts', size, phases, { ...pathEnv, ...env }, 60_000);
  it('2 ranks back to back: every dtype and op equals the reference, and calls complete on the calling thread', async () => {
    const ranks = await run(2, 'tight,late,mismatch,barriers,gathers');
    for (const rows of ranks) {
      // Small all-gathers and reduce-scatters ride in the round too.
      const gathers = phase(rows, 'gathers');
      expect(gathers.failures).toEqual([]);
      expect(gathers.wrong).toBe(0);
      expect(gathers.calls).toBe(240);
      expect(gathers.onCaller).toBeGreaterThan(0);
      // A barrier is the round alone: it completes there too.
      expect(phase(rows, 'barriers').calls).toBe(200);
      expect(phase(rows, 'barriers').onCaller).toBeGreaterThan(0);
      const tight = phase(rows, 'tight');
      expect(tight.failures).toEqual([]);
      expect(tight.wrong).toBe(0);
      expect(tight.calls).toBe(400);
      // The path is taken (how often depends on the host's other load; it is never forced).
      expect(tight.onCaller).toBeGreaterThan(0);
      const late = phase(rows, 'late');
      expect(late.failures).toEqual([]);
      expect(late.wrong).toBe(0);
      // A disagreement found on either thread fails the call on every rank alike, and
      // the ranks stay in step.
      const mm = phase(rows, 'mismatch');
      expect(mm.codes).toEqual(['ERR_SIZE_MISMATCH']);
      expect(mm.after).toEqual([3, 3, 3, 3, 3]);
    }
    // Rank 0 waits 30 ms for rank 1 at every call of the late phase: its polls give up
    // and the worker completes those calls.
    expect(phase(ranks[0]!, 'late').onCaller).toBeLessThan(20);
  }, 90_000);

  it('4 ranks (more than the cores of a 2-core host, where the poll yields the core): the same results, on the calling thread too', async () => {
    const ranks = await run(4, 'tight,mismatch,gathers');
    for (const rows of ranks) {
      expect(phase(rows, 'gathers').failures).toEqual([]);
      expect(phase(rows, 'gathers').wrong).toBe(0);
      const tight = phase(rows, 'tight');
      expect(tight.failures).toEqual([]);
      expect(tight.wrong).toBe(0);
      expect(tight.onCaller).toBeGreaterThan(0);
      expect(phase(rows, 'mismatch').codes).toEqual(['ERR_SIZE_MISMATCH']);
    }
  }, 90_000);

  it.runIf(boundVar === 'NCCL_NODE_TCP_CALLER_WAIT_US')('over TCP, calls whose round brings up to 1 MiB complete there too; beyond it on the worker', async () => {
    const ranks = await run(2, 'large');
    for (const rows of ranks) {
      const large = phase(rows, 'large');
      expect(large.failures).toEqual([]);
      expect(large.wrong).toBe(0);
      expect(large.calls).toBe(40);
      expect(large.onCaller).toBeGreaterThan(0);
      // The size decides before any wait: never on the calling thread.
      expect(large.onCallerBeyond).toBe(0);
    }
  }, 90_000);

  it.runIf(boundVar === 'NCCL_NODE_TCP_CALLER_WAIT_US')('over TCP at 4 ranks, all-reduces in two rounds complete there too, where both rounds bring up to 1 MiB', async () => {
    const ranks = await run(4, 'tworounds');
    for (const rows of ranks) {
      const two = phase(rows, 'tworounds');
      expect(two.failures).toEqual([]);
      expect(two.wrong).toBe(0);
      expect(two.calls).toBe(49);
      // 128 KiB-2 MiB at 4 ranks: every one of the 55 takes two rounds.
      expect(two.twoRounds).toBe(55);
      // Both rounds on the calling thread (how often depends on the host's other load).
      expect(two.onCaller).toBeGreaterThan(0);
      // 2 MiB: the rounds bring 3 MiB; the size decides before any wait.
      expect(two.onCallerBeyond).toBe(0);
      // A disagreement in the first round fails the call on every rank alike; no second round.
      expect(two.codes).toEqual(['ERR_SIZE_MISMATCH']);
      expect(two.afterOk).toBe(true);
    }
  }, 90_000);

  it(`${boundVar}=0: the same results, every call through the worker`, async () => {
    const ranks = await run(2, 'tight,mismatch', { [boundVar]: '0' });
    for (const rows of ranks) {
      expect(phase(rows, 'tight').failures).toEqual([]);
      expect(phase(rows, 'tight').onCaller).toBe(0);
      expect(phase(rows, 'mismatch').codes).toEqual(['ERR_SIZE_MISMATCH']);
    }
  }, 90_000);

  it('the poll lasts its bound, a poll that gives up shrinks it, one that succeeds restores it', async () => {
    // An 8 ms bound against a peer 30 ms late: the first
    // late call polls the whole bound, no longer, and the next ones a quarter of the one
    // before; after calls whose peers were in at once, a late call polls the whole bound again.
    const ranks = await run(2, 'bound', { [boundVar]: '8000' });
    for (const rows of ranks) expect(phase(rows, 'bound').failures).toEqual([]);
    const r0 = phase(ranks[0]!, 'bound');
    const [first, second, third] = r0.lateHeldMs!;
    expect(first).toBeGreaterThanOrEqual(7.5);
    expect(first).toBeLessThan(29); // gave up before the peer came at 30 ms
    expect(second).toBeLessThan(first! / 2); // 2 ms bound
    expect(third).toBeLessThan(first! / 2); // 0.5 ms bound
    expect(r0.restoredHeldMs).toBeGreaterThanOrEqual(7.5);
  }, 60_000);

  it('a peer that leaves while the others wait for it: the call fails with ERR_PEER_LOST, the next one at once', async () => {
    // Over TCP with a 10 s bound: the waiting rank sits in poll() on the calling thread
    // when its peer's connection closes, and must fail there, not wait out the bound.
    // Through the segment (its default bound) the poll sees no more than an abort or a
    // failed segment: it gives up at its bound, then the worker finds the peer gone.
    const tcp = boundVar === 'NCCL_NODE_TCP_CALLER_WAIT_US';
    const ranks = await run(3, 'death', { ...(tcp ? { [boundVar]: '10000000' } : {}), NCCL_NODE_TIMEOUT_MS: '30000' });
    for (const r of [0, 2]) {
      const death = phase(ranks[r]!, 'death') as unknown as DeathRow;
      expect(death.codes, `rank ${r}`).toEqual(['ERR_PEER_LOST', 'ERR_COMM_ABORTED']);
      expect(death.failMs![1], `rank ${r}: the second call fails at once`).toBeLessThan(1000);
      if (tcp) {
        // Found by the wait on the calling thread (it held the call until the peer left,
        // 300 ms in), not by the bound running out, nor handed to the worker.
        expect(death.heldMs![0], `rank ${r}`).toBeGreaterThan(150);
        expect(death.failMs![0], `rank ${r}`).toBeLessThan(5000);
      }
    }
  }, 60_000);

  it('a peer 3 s late: the call returns its promise at once and completes when the peer comes', async () => {
    const ranks = await run(2, 'blocking');
    const rows = phase(ranks[0]!, 'blocking');
    expect(rows.failures).toEqual([]);
    // A wait on the calling thread for the late peer would hold it about 3000 ms.
    expect(rows.heldMs).toBeLessThan(1000);
  }, 60_000);
});
