/**
 * For rank scripts (test/fixtures/prepared-allreduce.ts, repeated-allreduce.ts): `n`
 * all-reduces made by `call`, each timed from JavaScript, and what the communicator's
 * flight record and the collective metrics made of them. expectRecordedInSequence
 * (phases.ts) checks the report on the test's side.
 */
import type { Communicator } from '../../src/index.js';
import { collectiveTotals } from '../../src/metrics/collectives.js';

export interface RecordedCalls {
  entries: { op: string; state: string; seq: number; count: number }[];
  /** All-reduces the collective metrics counted meanwhile. */
  counted: number;
  /** Per entry: its times inside the span JavaScript measured around its call. */
  inside: boolean[];
}

export async function recordedCalls(comm: Communicator, call: () => unknown, n = 10): Promise<RecordedCalls> {
  const firstId = comm.flightRecord.nextId;
  const countBefore = collectiveTotals().allReduce?.calls ?? 0;
  const spans: { before: number; after: number }[] = [];
  const wallUs = (): number => (performance.timeOrigin + performance.now()) * 1000;
  for (let i = 0; i < n; i++) {
    const before = wallUs();
    await call();
    spans.push({ before, after: wallUs() });
  }
  const got = comm.flightRecord.since(firstId);
  // Each entry's times (the native side's stamps, brought onto performance.now()'s clock)
  // inside the span JavaScript measured around its call (2 us of slack: the recorder
  // rounds to microseconds).
  return {
    entries: got.map((e) => ({ op: e.op, state: e.state, seq: e.seq, count: e.count })),
    counted: (collectiveTotals().allReduce?.calls ?? 0) - countBefore,
    inside: got.map((e, i) => e.enqueuedUs >= spans[i]!.before - 2 && e.endedUs <= spans[i]!.after + 2 &&
      e.enqueuedUs <= e.endedUs),
  };
}
