/**
 * The times calls are stamped with (native/core/monotonic.h, CallClock): the kernel's
 * monotonic clock, read between anchors through the CPU's time-stamp counter. Checked
 * against this test's own readings of performance.now() around each call, over long
 * enough (0.4 s) for the counter's rate to be measured and used, for awaited calls
 * (a prepared start()) and blocking ones (run()): every flight record entry lies within
 * its call (1 us of rounding), ends no earlier than it started, and starts no earlier
 * than the entry before it ended. The same with NCCL_NODE_TSC=0 (the kernel's clock only).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { init, type Communicator } from '../../src/index.js';
import { nowUs } from '../../src/comm/flight-record.js';
import { freePort } from '../helpers/ranks.js';

const opened: Communicator[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((c) => c.destroy()));
  delete process.env.NCCL_NODE_TSC;
});

async function oneRank(): Promise<Communicator> {
  const comm = await init({ backend: 'gloo', rank: 0, worldSize: 1, token: 't', masterAddr: '127.0.0.1', masterPort: await freePort() });
  opened.push(comm);
  return comm;
}

const BATCH = 500;

/** Calls in batches for `ms`, each call bracketed by clock readings; the stamps that fall outside their call. */
async function outOfCall(comm: Communicator, ms: number): Promise<{ calls: number; outside: string[] }> {
  const buf = new Float32Array([1, 2]);
  const before = new Float64Array(BATCH);
  const after = new Float64Array(BATCH);
  const outside: string[] = [];
  let calls = 0;
  const end = performance.now() + ms;
  for (let batch = 0; performance.now() < end; batch++) {
    const first = comm.flightRecord.nextId;
    for (let i = 0; i < BATCH; i++) {
      before[i] = nowUs();
      if (batch % 2 === 0) await comm.allReduce(buf);
      else comm.allReduceSync(buf);
      after[i] = nowUs();
    }
    const entries = comm.flightRecord.since(first);
    expect(entries).toHaveLength(BATCH);
    entries.forEach((e, i) => {
      const previous = i > 0 ? entries[i - 1]! : undefined;
      if (e.enqueuedUs < before[i]! - 1 || e.endedUs > after[i]! + 1 || e.endedUs < e.enqueuedUs ||
        (previous !== undefined && e.enqueuedUs < previous.endedUs - 1)) {
        outside.push(`call ${calls + i}: stamped ${e.enqueuedUs}-${e.endedUs}, made ${before[i]}-${after[i]}`);
      }
    });
    calls += BATCH;
  }
  return { calls, outside };
}

describe('call stamps', () => {
  it('lie within their calls, in order, once the counter carries them', async () => {
    const comm = await oneRank();
    const { calls, outside } = await outOfCall(comm, 400);
    expect(calls).toBeGreaterThan(10 * BATCH);
    expect(outside.slice(0, 5)).toEqual([]);
  });

  it('with NCCL_NODE_TSC=0, from the kernel clock alone, too', async () => {
    process.env.NCCL_NODE_TSC = '0';
    const comm = await oneRank();
    const { outside } = await outOfCall(comm, 150);
    expect(outside.slice(0, 5)).toEqual([]);
  });
});
