/**
 * The checkpointer's save policy (when to save), against schedules computed here:
 * Daly's higher-order interval written out independently (and checkpointEverySteps),
 * a fixed interval, the `at` list; and on 2 Gloo ranks with different measured
 * costs, that every rank saves at the steps the maximum costs give.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Checkpointer, SavePolicy, checkpointEverySteps, listCheckpoints, type SavePolicyOptions } from '../../src/checkpoint/index.js';
import { isNcclNodeError } from '../../src/errors.js';
import { standinEnv } from '../gpu/helpers.js';
import { describeRanks, runRanks } from '../helpers/ranks.js';

const scratch = mkdtempSync(join(tmpdir(), 'ckpt-policy-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** Daly (2006): sqrt(2 delta M) [1 + sqrt(delta / 2M) / 3 + delta / 18M] - delta for delta < 2M, else M. */
function daly(delta: number, mtbf: number): number {
  if (delta >= 2 * mtbf) return mtbf;
  return Math.sqrt(2 * delta * mtbf) * (1 + Math.sqrt(delta / (2 * mtbf)) / 3 + delta / (18 * mtbf)) - delta;
}
const everySteps = (stall: number, step: number, mtbfHours: number) => Math.max(1, Math.round(daly(stall, mtbfHours * 3600) / step));

/** The steps in (first, last] a loop saves at: it asks, saves, and feeds the cost after the first save. */
function schedule(o: SavePolicyOptions, first: number, last: number, cost = { stallSeconds: 0.5, stepSeconds: 1 }): number[] {
  const policy = new SavePolicy(o);
  const out: number[] = [];
  for (let step = first + 1; step <= last; step++) {
    if (!policy.shouldSave(step, { last: step === last })) continue;
    out.push(step);
    policy.saved();
    if (policy.needsCost) policy.recordCost(cost);
  }
  return out;
}

function code(f: () => unknown): string | undefined {
  try {
    f();
  } catch (err) {
    return isNcclNodeError(err) ? err.code : String(err);
  }
  return undefined;
}

describe('checkpoint save policy', () => {
  it('default: the first step of the run, then every Daly interval from its cost, and the last step', () => {
    // delta 0.5 s, M = 1 h, 1 s steps: Daly gives 59.67 s, so every 60 steps.
    const n = everySteps(0.5, 1, 1);
    expect(n).toBe(60);
    expect(checkpointEverySteps({ saveSeconds: 0.5, mtbfSeconds: 3600, stepSeconds: 1 })).toBe(n);
    expect(schedule({ mtbfHours: 1 }, 0, 200)).toEqual([1, 60, 120, 180, 200]);
    // Resumed at step 7: the first save is after step 8; the interval counts from step 0.
    expect(schedule({ mtbfHours: 1 }, 7, 130)).toEqual([8, 60, 120, 130]);
    // Default MTBF 24 h, 0.25 s steps, 2 s stall.
    expect(schedule({}, 0, 5000, { stallSeconds: 2, stepSeconds: 0.25 })).toEqual(
      [1, ...Array.from({ length: Math.floor(5000 / everySteps(2, 0.25, 24)) }, (_, i) => (i + 1) * everySteps(2, 0.25, 24)), 5000]);
  });

  it('waits for the cost after the first save, and takes it once', () => {
    const p = new SavePolicy({ mtbfHours: 1 });
    expect(p.needsCost).toBe(false);
    expect(p.shouldSave(1)).toBe(true);
    p.saved();
    expect(p.needsCost).toBe(true);
    expect(p.every).toBeUndefined();
    expect(p.shouldSave(2)).toBe(false); // no interval yet: only the last step
    expect(p.shouldSave(2, { last: true })).toBe(true);
    expect(p.recordCost({ stallSeconds: 0.5, stepSeconds: 1 })).toBe(60);
    expect(p.every).toBe(60);
    expect(p.needsCost).toBe(false);
    expect(code(() => p.recordCost({ stallSeconds: 0.5, stepSeconds: 1 }))).toBe('ERR_INVALID_ARGUMENT');
  });

  it('every N: multiples of N and the last step; no cost is taken', () => {
    expect(schedule({ every: 3 }, 0, 10)).toEqual([3, 6, 9, 10]);
    expect(schedule({ every: 4 }, 5, 17)).toEqual([8, 12, 16, 17]);
    const p = new SavePolicy({ every: 3 });
    p.saved();
    expect(p.needsCost).toBe(false);
    expect(code(() => p.recordCost({ stallSeconds: 1, stepSeconds: 1 }))).toBe('ERR_INVALID_ARGUMENT');
  });

  it('at: exactly the listed steps, no final save; the list overrides every', () => {
    expect(schedule({ at: [2, 5, 11] }, 0, 10)).toEqual([2, 5]);
    expect(schedule({ at: [3], every: 2 }, 0, 6)).toEqual([3]);
    expect(schedule({ at: [] }, 0, 6)).toEqual([]);
  });

  it('refuses bad options with ERR_INVALID_ARGUMENT naming the field', () => {
    for (const o of [{ every: 0 }, { every: -2 }, { every: 1.5 }, { at: [1, -1] }, { at: [0.5] }, { mtbfHours: 0 }, { mtbfHours: NaN }]) {
      expect(code(() => new SavePolicy(o)), JSON.stringify(o)).toBe('ERR_INVALID_ARGUMENT');
    }
    expect(() => new SavePolicy({ every: 0 })).toThrow(/every: expected a positive integer/);
    // The MTBF is not used with a fixed interval or list.
    expect(code(() => new SavePolicy({ every: 2, mtbfHours: NaN }))).toBeUndefined();
  });

  it('a Checkpointer asks its policy and marks its saves (one process)', async () => {
    const dir = mkdtempSync(join(scratch, 'one-'));
    const ck = await Checkpointer.create(dir, { keep: 0, policy: { mtbfHours: 0.01 } });
    const saved: number[] = [];
    for (let step = 1; step <= 30; step++) {
      if (!ck.shouldSave(step, { last: step === 30 })) continue;
      await ck.save({ tensors: { x: { data: new Float32Array([step]), globalShape: [1], offset: 0 } }, train: { step } }, { async: false });
      saved.push(step);
      if (ck.needsSaveCost) {
        expect(await ck.recordSaveCost({ stallSeconds: 0.5, stepSeconds: 0.5 })).toEqual(
          { stallSeconds: 0.5, stepSeconds: 0.5, every: everySteps(0.5, 0.5, 0.01), mtbfHours: 0.01 });
      }
    }
    await ck.close();
    const n = everySteps(0.5, 0.5, 0.01); // 11
    expect(saved).toEqual([1, ...[1, 2].map((k) => k * n).filter((s) => s < 30), 30]);
    expect((await listCheckpoints(dir)).map((c) => c.step)).toEqual(saved);
    await expect(Checkpointer.create(dir, { policy: { every: 0 } })).rejects.toMatchObject({ code: 'ERR_INVALID_ARGUMENT' });
  });

  it.each(['gloo', 'nccl'] as const)('2 ranks with different costs save at the same steps: those of the maximum costs (%s)', async (backend) => {
    const mtbfHours = 0.01;
    const costs = [{ stallSeconds: 0.2, stepSeconds: 0.5 }, { stallSeconds: 0.5, stepSeconds: 0.25 }];
    const n = everySteps(0.5, 0.5, mtbfHours);
    // Each rank's own costs would give other intervals: the maximum is what makes them agree.
    expect([everySteps(0.2, 0.5, mtbfHours), everySteps(0.5, 0.25, mtbfHours)]).not.toContain(n);
    const dir = mkdtempSync(join(scratch, 'ranks-'));
    // On NCCL (the stand-ins here) the communicator takes device memory only: the cost exchange must not hand it host arrays.
    const env = backend === 'nccl' ? standinEnv() : {};
    const res = await runRanks('test/checkpoint/policy-worker.ts', 2, { payload: { dir, steps: 30, mtbfHours, costs, backend }, env, timeoutMs: 60_000 });
    const want = [1, ...Array.from({ length: Math.floor(29 / n) }, (_, i) => (i + 1) * n).filter((s) => s < 30), 30];
    for (const r of res) {
      expect(r.code, describeRanks(res)).toBe(0);
      expect(r.reports[0]).toEqual({ rank: r.rank, saved: want, interval: { stallSeconds: 0.5, stepSeconds: 0.5, every: n, mtbfHours } });
    }
    expect((await listCheckpoints(dir)).map((c) => c.step)).toEqual(want);
  }, 90_000);
});
