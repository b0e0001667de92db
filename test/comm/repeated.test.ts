import { describe, expect, it } from 'vitest';
import { expectRecordedInSequence, phaseOf as phase, runPhases } from '../helpers/phases.js';

// Awaited allReduce() made again on the same host memory: prepared the second time and
// made as the prepared call's start() from then on (src/comm/repeated-calls.ts). Its
// results against the reference every rank computes, over shared memory and over TCP;
// a late peer hands it to the communicator's thread (the event loop free meanwhile); it
// lines up behind unsettled calls; memory transferred under it; its record and metrics;
// its timeout. With NCCL_NODE_PREPARE_REPEATED=0 the same results through the full path.
type Stats = { prepared: number; runs: number; slots: number } | null;
type Row = { phase?: string; failures?: string[]; calls?: number; before?: Stats; afterAwaited?: Stats; after?: Stats | number[];
  stats?: Stats; pendingAtReturn?: boolean[]; turns?: number[] | number; order?: number[]; inFlight?: number;
  codes?: string[]; messages?: string[]; pending?: boolean; heldMs?: number; runs?: number };

const run = (size: number, phases: string, shm: boolean, env: Record<string, string> = {}): Promise<Row[][]> =>
  runPhases('test/fixtures/repeated-allreduce.ts', size, phases, { NCCL_NODE_SHM: shm ? '1' : '0', ...env }, 120_000);

describe.each([
  ['shared memory', true],
  ['TCP', false],
])('repeated awaited allReduce over %s', (_name, shm) => {
  it('3 ranks: every dtype and op, in place and into out, to 64 KiB, and prepareAllReduce().start(): equal to the reference', async () => {
    const ranks = await run(3, 'values,record', shm);
    for (const rows of ranks) {
      const v = phase(rows, 'values');
      expect(v.failures).toEqual([]);
      // Each call seen a second time was prepared, and made as the prepared call from then on.
      const before = v.before!;
      const awaited = v.afterAwaited!;
      expect(awaited.prepared - before.prepared).toBe(v.calls);
      expect(awaited.runs - before.runs).toBe(3 * v.calls!);
      expect(phase(rows, 'record').runs).toBe(10);
    }
    expectRecordedInSequence(ranks, 'record', 3);
  }, 180_000);

  it('a late peer: the call returns pending, the event loop turns, the result is right; behind unsettled calls it keeps issue order', async () => {
    const ranks = await run(2, 'late,queued', shm);
    for (const rows of ranks) {
      const l = phase(rows, 'late');
      expect(l.failures).toEqual([]);
      // On time twice each (2 ranks), the other rank 100 ms late.
      expect(l.pendingAtReturn).toEqual([true, true]);
      for (const t of l.turns as number[]) expect(t).toBeGreaterThanOrEqual(5);
      expect(l.stats!.prepared).toBe(1);
      const q = phase(rows, 'queued');
      expect(q.failures).toEqual([]);
      expect(q.order).toEqual([0, 1, 2, 3]);
      expect(q.inFlight).toBe(0);
      expect(q.stats!.prepared).toBe(4);
    }
  }, 120_000);

  it('the array transferred under a pending repeated call: that rank\'s Work rejects naming it, the others complete, later calls line up', async () => {
    const ranks = await run(2, 'detached', shm);
    const [d0, d1] = ranks.map((rows) => phase(rows, 'detached'));
    expect(d0!.pending).toBe(true);
    expect(d0!.codes).toEqual(['ERR_INVALID_ARGUMENT']);
    expect(d0!.messages![0]).toMatch(/allReduce failed on rank 0 of 2: the buffer's ArrayBuffer was detached \(transferred\) while the operation ran/);
    expect(d1!.codes).toEqual(['ok']);
    for (const d of [d0!, d1!]) {
      expect(d.after).toEqual(Array(6).fill(6));
      expect(d.inFlight).toBe(0);
    }
  }, 60_000);

  it('a peer that never comes: ERR_TIMEOUT after the call\'s timeout, the event loop free meanwhile', async () => {
    const [r0] = await run(2, 'timeout', shm);
    const t = phase(r0!, 'timeout');
    expect(t.codes).toEqual(['ERR_TIMEOUT']);
    expect(t.heldMs).toBeGreaterThanOrEqual(450);
    expect(t.heldMs).toBeLessThan(2500);
    expect(t.turns).toBeGreaterThanOrEqual(40);
    // The second call was prepared and made as the prepared call, the third too.
    expect(t.stats!.runs).toBe(2);
  }, 60_000);
});

describe('repeated awaited allReduce turned off (NCCL_NODE_PREPARE_REPEATED=0)', () => {
  it('the same results through the full path, nothing prepared', async () => {
    const ranks = await run(2, 'values,queued', true, { NCCL_NODE_PREPARE_REPEATED: '0' });
    for (const rows of ranks) {
      const v = phase(rows, 'values');
      expect(v.failures).toEqual([]);
      expect(v.before).toBeNull();
      expect(v.after).toBeNull();
      expect(phase(rows, 'queued').failures).toEqual([]);
    }
  }, 120_000);
});
