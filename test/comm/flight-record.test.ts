/**
 * The JS flight record on its own (no communicator): sequence numbers, the ring's
 * capacity and wrap-around, the states and times an entry goes through, and the JSON
 * layout `nccl-node trace analyze` reads. Expectations are computed here from the
 * calls made, entry by entry.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { FlightRecord, wallUs } from '../../src/comm/flight-record.js';

function withCapacity(n: string | undefined): FlightRecord {
  vi.stubEnv('NCCL_NODE_FLIGHT_RECORDER_SIZE', n);
  return new FlightRecord('world', 1, 4);
}

afterEach(() => {
  vi.unstubAllEnvs();
});

describe('FlightRecord', () => {
  it('numbers collectives in issue order and gives send/recv seq -1', () => {
    const r = withCapacity(undefined);
    const a = r.begin('allReduce', 8, 'float32', -1, 10);
    const s = r.begin('send', 4, 'int32', 2, 11);
    const b = r.begin('broadcast', 3, 'float64', 0, 12);
    r.completed(a, 20);
    r.completed(s, 21);
    r.failed(b, Object.assign(new Error('x'), { code: 'ERR_BACKEND' }), 22);
    const got = r.since(0);
    expect(got.map((e) => [e.id, e.seq, e.op, e.count, e.dtype, e.peer, e.state])).toEqual([
      [0, 0, 'allReduce', 8, 'float32', -1, 'completed'],
      [1, -1, 'send', 4, 'int32', 2, 'completed'],
      [2, 1, 'broadcast', 3, 'float64', 0, 'failed'],
    ]);
    expect(got.map((e) => [e.enqueuedUs, e.endedUs])).toEqual([[wallUs(10), wallUs(20)], [wallUs(11), wallUs(21)], [wallUs(12), wallUs(22)]]);
    expect(r.lastEnqueuedSeq).toBe(1);
    expect(r.lastCompletedSeq).toBe(0);
    expect(r.nextId).toBe(3);
  });

  it('starts an operation when it was submitted or when the one before it ended, whichever is later', () => {
    const r = withCapacity(undefined);
    const a = r.begin('allReduce', 1, 'float32', -1, 100);
    const b = r.begin('allReduce', 1, 'float32', -1, 101);  // queued behind a
    r.completed(a, 150);
    r.completed(b, 170);
    const c = r.begin('allReduce', 1, 'float32', -1, 200);  // after b ended
    r.completed(c, 210);
    const [ea, eb, ec] = r.since(0);
    expect(ea!.startedUs).toBe(wallUs(100));
    expect(eb!.startedUs).toBe(wallUs(150));
    expect(ec!.startedUs).toBe(wallUs(200));
  });

  it('names timeouts and aborts by the error code', () => {
    const r = withCapacity(undefined);
    const ids = [r.begin('barrier', 0, 'uint8', -1, 1), r.begin('allGather', 2, 'int8', -1, 2)];
    // A timeout dumps this process's records: into a directory of the test's own.
    const dir = mkdtempSync(join(tmpdir(), 'flight-record-'));
    vi.stubEnv('NCCL_NODE_TRACE_DIR', dir);
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {});
    try {
      r.failed(ids[0]!, { code: 'ERR_TIMEOUT' }, 3);
      r.failed(ids[1]!, { code: 'ERR_COMM_ABORTED' }, 4);
    } finally {
      warn.mockRestore();
      rmSync(dir, { recursive: true, force: true });
    }
    expect(r.since(0).map((e) => e.state)).toEqual(['timeout', 'aborted']);
  });

  it('keeps the last NCCL_NODE_FLIGHT_RECORDER_SIZE entries and ignores the end of one it no longer holds', () => {
    const r = withCapacity('3');
    const first = r.begin('allReduce', 0, 'float32', -1, 1);  // still running when it leaves the ring
    const ids = [first];
    for (let i = 1; i < 5; i++) {
      const id = r.begin('allReduce', i, 'float32', -1, 10 * i);
      r.completed(id, 10 * i + 5);
      ids.push(id);
    }
    r.completed(first, 60);
    const held = r.since(0);
    expect(held.map((e) => [e.id, e.count, e.state])).toEqual([[2, 2, 'completed'], [3, 3, 'completed'], [4, 4, 'completed']]);
    expect(held.map((e) => e.endedUs)).toEqual([wallUs(25), wallUs(35), wallUs(45)]);
    expect(r.since(3).map((e) => e.id)).toEqual([3, 4]);
    expect(r.since(5)).toEqual([]);
  });

  it('with NCCL_NODE_FLIGHT_RECORDER_SIZE=0 holds nothing but still numbers', () => {
    const r = withCapacity('0');
    const a = r.begin('allReduce', 1, 'float32', -1, 1);
    r.completed(a, 2);
    r.refused('barrier');
    expect(r.since(0)).toEqual([]);
    expect(r.nextId).toBe(2);
    expect(r.lastEnqueuedSeq).toBe(1);
    expect(r.json().entries).toEqual([]);
  });

  it('counts a refused call as a failed one with its own sequence number', () => {
    const r = withCapacity(undefined);
    r.refused('allReduce');
    r.refused('send');  // no sequence number, no entry
    const e = r.since(0);
    expect(e.map((x) => [x.seq, x.op, x.state])).toEqual([[0, 'allReduce', 'failed']]);
    expect(e[0]!.endedUs).toBe(e[0]!.enqueuedUs);
  });

  it('dumps the first unfinished operation as started and those behind it as scheduled', () => {
    const r = withCapacity(undefined);
    const a = r.begin('allReduce', 1, 'float32', -1, 10);
    r.completed(a, 20);
    r.begin('allGather', 2, 'float32', -1, 15);
    r.begin('barrier', 0, 'uint8', -1, 30);
    const j = r.json();
    expect(j).toMatchObject({ comm: 'world', rank: 1, size: 4, lastEnqueuedSeq: 2, lastStartedSeq: 1, lastCompletedSeq: 0 });
    expect(j.entries.map((e) => [e.seq, e.state, e.startedUs, e.endedUs])).toEqual([
      [0, 'completed', wallUs(10), wallUs(20)],
      [1, 'started', wallUs(20), 0],
      [2, 'scheduled', 0, 0],
    ]);
    // The dump is a copy: the record goes on.
    expect(r.since(0).map((e) => e.state)).toEqual(['completed', 'scheduled', 'scheduled']);
  });

  it('settles an entry through op() when its promise does', async () => {
    const r = withCapacity(undefined);
    let resolve!: () => void;
    let reject!: (e: unknown) => void;
    r.op('split', 0, 'uint8', -1, new Promise<void>((res) => { resolve = res; }));
    r.op('barrier', 0, 'uint8', -1, new Promise<void>((_, rej) => { reject = rej; }));
    expect(r.since(0).map((e) => e.state)).toEqual(['scheduled', 'scheduled']);
    resolve();
    reject(new Error('no'));
    await new Promise((res) => setImmediate(res));
    expect(r.since(0).map((e) => e.state)).toEqual(['completed', 'failed']);
  });
});
