/**
 * The recovery ladder's decisions against a table (injected faults and membership
 * outcomes), their logging and counting; and live: 2 ranks with minSize 2, rank 1
 * SIGKILLs itself, so rank 0's round finds 1 member and it exits with
 * EXIT_FULL_RESTART (what `nccl-node run --max-restarts` restarts the gang on).
 */
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { EXIT_FULL_RESTART, faultOf, RecoveryLadder } from '../../src/ft/ladder.js';
import { NcclNodeError } from '../../src/errors.js';
import { runRanks, describeRanks } from '../helpers/ranks.js';
import { config, corpus } from './fixture.js';

describe('recovery ladder', () => {
  const ladder = new RecoveryLadder({ maxRetries: 1, minSize: 2, globalBatch: 12, logger: pino({ level: 'silent' }) });

  it.each([
    // code, retries so far, communicator usable -> action
    ['ERR_TIMEOUT', 0, true, 'retry'],
    ['ERR_TIMEOUT', 1, true, 'reform'],
    ['ERR_TIMEOUT', 0, false, 'reform'],
    ['ERR_PEER_LOST', 0, true, 'reform'],
    ['ERR_PEER_LOST', 0, false, 'reform'],
    ['ERR_COMM_ABORTED', 0, false, 'reform'],
    ['ERR_NCCL', 0, false, 'reform'],
    ['ERR_INVALID_ARGUMENT', 0, true, 'raise'],
    ['ERR_UNKNOWN', 0, true, 'raise'],
  ] as const)('fault %s after %i retries (usable: %s): %s', (code, retries, usable, action) => {
    const err = code === 'ERR_UNKNOWN' ? new Error('boom') : new NcclNodeError(code, 'injected');
    expect(ladder.onFault(faultOf(err, retries, usable)).action).toBe(action);
  });

  it.each([
    // members before, members after the round -> action
    [4, 3, 'shrink'],
    [3, 2, 'shrink'],
    [3, 3, 'restart-in-place'],
    [2, 3, 'grow'],
    [3, 1, 'full-restart'], // fewer than minSize 2
    [4, 0, 'full-restart'],
    [6, 5, 'full-restart'], // 12 rows do not divide by 5
  ] as const)('round %i -> %i members: %s', (before, after, action) => {
    expect(ladder.onRound(before, after).action).toBe(action);
  });

  it('logs each decision with its cost and counts it in the registry', async () => {
    const lines: string[] = [];
    const sink = new Writable({ write(chunk, _enc, cb) { lines.push(String(chunk)); cb(); } });
    const l = new RecoveryLadder({ logger: pino({}, sink) });
    l.record({ action: 'shrink', reason: '1 of 3 members lost' }, 812.5, { generation: 1, size: 2, step: 4 });
    l.record({ action: 'retry', reason: 'transient timeout' }, 0.4, { step: 1 });
    l.record({ action: 'shrink', reason: '1 of 2 members lost' }, 801, { generation: 2, size: 1, step: 6 });
    const logged = lines.map((x) => JSON.parse(x) as Record<string, unknown>);
    expect(logged.map((x) => [x.ft, x.ms, x.step])).toEqual([['shrink', 812.5, 4], ['retry', 0.4, 1], ['shrink', 801, 6]]);
    const m = await l.registry.getSingleMetricAsString('nccl_node_ft_decisions_total');
    expect(m).toContain('nccl_node_ft_decisions_total{action="shrink"} 2');
    expect(m).toContain('nccl_node_ft_decisions_total{action="retry"} 1');
    const s = await l.registry.getSingleMetric('nccl_node_ft_recovery_seconds_total')!.get();
    expect(s.values.find((v) => v.labels.action === 'shrink')!.value).toBeCloseTo(1.6135, 6);
  });

  it(`too few survivors: rank 0 exits with EXIT_FULL_RESTART (${EXIT_FULL_RESTART})`, async () => {
    const cfg = { ...config(await corpus(), 6), ladder: { minSize: 2 } };
    const rs = await runRanks('test/ft/worker.ts', 2, { payload: { cfg, windowMs: 500, timeoutMs: 15_000, dieRank: 1, dieAt: 2 }, timeoutMs: 40_000 });
    const why = describeRanks(rs);
    expect(rs[1]!.signal, why).toBe('SIGKILL');
    expect(rs[0]!.code, why).toBe(EXIT_FULL_RESTART);
    const decision = rs[0]!.stderr.split('\n').filter((x) => x.startsWith('{')).map((x) => JSON.parse(x) as Record<string, unknown>).find((x) => x.ft);
    expect(decision).toMatchObject({ ft: 'full-restart', step: 2 });
    console.log(`full-restart decision after ${String(decision!.ms)} ms (window 500 ms)`);
  });
});
