/**
 * Rank scripts that run named phases and report one row per phase (test/fixtures/
 * sync-allreduce.ts, prepared-allreduce.ts, caller.ts): run them, expect every rank
 * to exit 0, and find a phase's row.
 */
import { expect } from 'vitest';
import { describeRanks, runRanks } from './ranks.js';
import type { RecordedCalls } from './recorded-calls.js';

/** Every rank's reports of `script` run with the comma-separated `phases` on `size` ranks. */
export async function runPhases<Row>(script: string, size: number, phases: string, env: Record<string, string>,
  timeoutMs: number): Promise<Row[][]> {
  const results = await runRanks(script, size, { args: [phases], env, timeoutMs });
  expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
  return results.map((r) => r.reports as Row[]);
}

/** The row a rank reported for phase `name`. */
export const phaseOf = <Row extends { phase?: string }>(rows: Row[], name: string): Row => rows.find((r) => r.phase === name)!;

/**
 * Every rank's `name` row carries recordedCalls()'s report (recorded-calls.ts) of `n`
 * all-reduces of `count` elements: each in the flight record as completed, in consecutive
 * sequence numbers that start alike on every rank, with times inside the span JavaScript
 * saw, and counted by the collective metrics.
 */
export function expectRecordedInSequence(ranks: { phase?: string }[][], name: string, count: number, n = 10): void {
  const rows = ranks.map((r) => phaseOf(r, name) as unknown as RecordedCalls);
  for (const rec of rows) {
    expect(rec.entries.map((e) => [e.op, e.state, e.count])).toEqual(Array.from({ length: n }, () => ['allReduce', 'completed', count]));
    const seqs = rec.entries.map((e) => e.seq);
    expect(seqs).toEqual(seqs.map((_, i) => seqs[0]! + i));
    expect(rec.counted).toBe(n);
    expect(rec.inside).toEqual(Array(n).fill(true));
  }
  expect(new Set(rows.map((rec) => rec.entries[0]!.seq)).size).toBe(1);
}
