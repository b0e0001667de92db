/**
 * Rank scripts that run named phases and report one row per phase (test/fixtures/
 * sync-allreduce.ts, prepared-allreduce.ts, caller.ts): run them, expect every rank
 * to exit 0, and find a phase's row.
 */
import { expect } from 'vitest';
import { describeRanks, runRanks } from './ranks.js';

/** Every rank's reports of `script` run with the comma-separated `phases` on `size` ranks. */
export async function runPhases<Row>(script: string, size: number, phases: string, env: Record<string, string>,
  timeoutMs: number): Promise<Row[][]> {
  const results = await runRanks(script, size, { args: [phases], env, timeoutMs });
  expect(results.map((r) => r.code), describeRanks(results)).toEqual(results.map(() => 0));
  return results.map((r) => r.reports as Row[]);
}

/** The row a rank reported for phase `name`. */
export const phaseOf = <Row extends { phase?: string }>(rows: Row[], name: string): Row => rows.find((r) => r.phase === name)!;
