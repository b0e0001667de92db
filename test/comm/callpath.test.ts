/**
 * The call path of a collective. On a one-rank communicator a small host op with
 * nothing ahead of it runs on the calling thread and is settled when the call
 * returns (native/core/engine.cpp, runOnCaller); otherwise it goes through the
 * communicator's worker. Both must give the same results, settle in issue order,
 * keep failing bad calls with their codes, and leave a flight record of every op.
 * The references: values computed here, and the same calls with the calling-thread
 * path switched off (NCCL_NODE_INLINE_COMPLETION=0).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { init, isNcclNodeError, type Communicator } from '../../src/index.js';
import { collectiveTotals } from '../../src/metrics/collectives.js';
import { nowUs } from '../../src/comm/flight-record.js';
import { freePort, runRanks, describeRanks } from '../helpers/ranks.js';

const opened: Communicator[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((c) => c.destroy()));
  delete process.env.NCCL_NODE_INLINE_COMPLETION;
});

/** A one-rank communicator; `inline: false` sends every op through the worker. */
async function oneRank(inline = true): Promise<Communicator> {
  if (!inline) process.env.NCCL_NODE_INLINE_COMPLETION = '0';
  const comm = await init({ backend: 'gloo', rank: 0, worldSize: 1, token: 't', masterAddr: '127.0.0.1', masterPort: await freePort() });
  delete process.env.NCCL_NODE_INLINE_COMPLETION;
  opened.push(comm);
  return comm;
}

const ramp = (n: number, from = 1) => Float32Array.from({ length: n }, (_, i) => from + i);

describe('one rank', () => {
  it('completes a small op on the calling thread: the result is there when the call returns', async () => {
    const comm = await oneRank();
    const input = ramp(8);
    const out = new Float32Array(8);
    const w = comm.allReduce(input, { out, op: 'avg' });
    // Nothing left in flight, the output already written and the Work and its flight
    // record entry settled, before any await: nothing of it is left for a later turn.
    expect(comm.inFlight).toBe(0);
    expect(Array.from(out)).toEqual(Array.from(input));
    expect(w.isCompleted()).toBe(true);
    expect(comm.flightRecord.since(comm.flightRecord.nextId - 1)[0]).toMatchObject({ op: 'allReduce', state: 'completed' });
    await w;
    expect(w.isCompleted()).toBe(true);
    expect(w.isFailed()).toBe(false);

    const gathered = new Int32Array(3);
    const g = comm.allGather(Int32Array.from([7, 8, 9]), gathered);
    expect(Array.from(gathered)).toEqual([7, 8, 9]);
    await g;
    const rs = new Float64Array(2);
    await comm.reduceScatter(Float64Array.from([0.5, -2]), rs, { op: 'max' });
    expect(Array.from(rs)).toEqual([0.5, -2]);
    const a2a = new Uint8Array(4);
    await comm.allToAll(Uint8Array.from([1, 2, 3, 4]), a2a);
    expect(Array.from(a2a)).toEqual([1, 2, 3, 4]);
    await comm.barrier();
  });

  it('goes through the worker when switched off, with the same results', async () => {
    const comm = await oneRank(false);
    const input = ramp(8);
    const out = new Float32Array(8);
    const w = comm.allReduce(input, { out, op: 'avg' });
    // Still queued: only the JS thread settles it, after this turn.
    expect(comm.inFlight).toBe(1);
    await w;
    expect(comm.inFlight).toBe(0);
    expect(Array.from(out)).toEqual(Array.from(input));
  });

  it('settles in issue order when small ops follow one the worker runs', async () => {
    const comm = await oneRank();
    const order: number[] = [];
    const big = new Float32Array(1 << 16).fill(2); // 256 KiB: over the calling-thread limit
    const bufs = [ramp(4), big, ramp(4, 10), ramp(4, 20), new Float32Array(1 << 16).fill(3), ramp(4, 30)];
    const inFlight: number[] = [];
    const works = bufs.map((b) => {
      const w = comm.allReduce(b, { op: 'sum' });
      inFlight.push(comm.inFlight);
      return w;
    });
    works.forEach((w, i) => void w.then(() => order.push(i)));
    await Promise.all(works);
    // The first ran at once; everything after the big one queued behind it.
    expect(inFlight).toEqual([0, 1, 2, 3, 4, 5]);
    expect(order).toEqual([0, 1, 2, 3, 4, 5]);
    expect(Array.from(bufs[3]!)).toEqual([20, 21, 22, 23]);
    expect(big[12345]).toBe(2);
    // Once everything settled, the calling-thread path is back.
    void comm.allReduce(ramp(2));
    expect(comm.inFlight).toBe(0);
  });

  it('keeps rejecting bad calls with their codes, and the next call still runs', async () => {
    const comm = await oneRank();
    const seqBefore = comm.flightRecord.nextId;
    expect(() => comm.allGather(ramp(4), new Float32Array(3))).toThrow(expect.objectContaining({ code: 'ERR_SIZE_MISMATCH' }));
    expect(() => comm.allReduce(ramp(4), { op: 'xor' as 'sum' })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT' }));
    expect(() => comm.broadcast(ramp(4), { root: 1 })).toThrow(/root must be a rank in 0..0/);
    // The stand-ins of the refused calls are in flight: this one queues behind them.
    const out = new Float32Array(4);
    const w = comm.allReduce(ramp(4), { out });
    await w;
    expect(Array.from(out)).toEqual([1, 2, 3, 4]);
    const entries = comm.flightRecord.since(seqBefore);
    const s0 = entries[0]!.seq;
    expect(entries.map((e) => [e.op, e.seq - s0, e.state])).toEqual([
      ['allGather', 0, 'failed'], ['allReduce', 1, 'failed'], ['broadcast', 2, 'failed'], ['allReduce', 3, 'completed'],
    ]);
    // After abort nothing runs, on either path.
    comm.abort();
    expect(() => comm.allReduce(ramp(1))).toThrow(expect.objectContaining({ code: 'ERR_COMM_ABORTED' }));
    opened.splice(opened.indexOf(comm), 1);
  });

  it('records every op in the flight record and the collective totals', async () => {
    const comm = await oneRank();
    const before = collectiveTotals().allReduce?.calls ?? 0;
    const secondsBefore = collectiveTotals().allReduce?.seconds ?? 0;
    const first = comm.flightRecord.nextId;
    const buf = ramp(1);
    const t0 = nowUs();
    for (let i = 0; i < 50; i++) await comm.allReduce(buf);
    const queued = Array.from({ length: 50 }, () => comm.allReduce(buf));
    await Promise.all(queued);
    // Blocking calls on a new array each time: checked and built anew every call.
    for (let i = 0; i < 20; i++) comm.allReduceSync(ramp(1));
    const t1 = nowUs();
    const entries = comm.flightRecord.since(first);
    expect(entries).toHaveLength(120);
    expect(entries.every((e, i) => e.op === 'allReduce' && e.state === 'completed' && e.seq === entries[0]!.seq + i)).toBe(true);
    expect(entries.every((e) => e.endedUs >= e.enqueuedUs)).toBe(true);
    // The times come from the native side's stamps (NativeComm.stampInto), on the
    // monotonic clock: converted, they fall within this test's own readings (1 us of rounding).
    expect(entries.every((e) => e.enqueuedUs >= t0 - 1 && e.endedUs <= t1 + 1)).toBe(true);
    expect(entries.every((e, i) => i === 0 || e.enqueuedUs >= entries[i - 1]!.enqueuedUs)).toBe(true);
    expect(collectiveTotals().allReduce!.calls - before).toBe(120);
    // Calls completed on the calling thread count their time too (read around the call).
    expect(collectiveTotals().allReduce!.seconds).toBeGreaterThan(secondsBefore);
  });

  it('fails an op on a destroyed communicator with ERR_COMM_DESTROYED', async () => {
    const comm = await oneRank();
    await comm.allReduce(ramp(2));
    await comm.destroy();
    opened.splice(opened.indexOf(comm), 1);
    let err: unknown;
    try {
      comm.allReduce(ramp(2));
    } catch (e) {
      err = e;
    }
    expect(isNcclNodeError(err, 'ERR_COMM_DESTROYED')).toBe(true);
  });
});

describe('two ranks', () => {
  it('queued calls of every size give the sums computed here, in issue order', async () => {
    const results = await runRanks<{ ok: boolean; order: number[]; wrong: string[] }>('test/comm/callpath-worker.mts', 2, { timeoutMs: 60_000 });
    for (const r of results) {
      expect(r.code, describeRanks(results)).toBe(0);
      const rep = r.reports[0] as { wrong: string[]; order: number[] };
      expect(rep.wrong).toEqual([]);
      expect(rep.order).toEqual([...Array(rep.order.length).keys()]);
    }
  }, 90_000);
});
