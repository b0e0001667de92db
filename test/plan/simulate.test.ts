/**
 * simulate() and sweep() against first-principles expectations: Llama 3's published
 * interruption counts (466 in 54 days on 16,384 GPUs, 419 unexpected), the
 * first-order waste model of a checkpointed run, and Young's / Daly's intervals
 * computed here by hand.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { simulate, sweep } from '../../src/plan/index.js';
import { isNcclNodeError } from '../../src/errors.js';

const H = 54 * 24 * 3600; // the Llama 3 snapshot, seconds
const UNPLANNED = 419 / H; // fleet rate, per second
const PLANNED = 47 / H;
const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;

describe('simulate with Llama 3 interruption rates', () => {
  // Recovery assumed: 10 s checkpoint stall (asynchronous save), 1 min detection,
  // 4 min relaunch + load, hot spares so no node replacement wait.
  const C = 10;
  const recovery = { checkpointSeconds: C, detectSeconds: 60, restartSeconds: 240, hotSpares: 64 };
  const runs = Array.from({ length: 10 }, (_, i) => simulate({ ...recovery, seed: 100 + i }));

  it('draws about 466 interruptions in 54 days (Poisson)', () => {
    const n = mean(runs.map((r) => r.interruptions));
    // Mean of 10 Poisson(466) counts: sd sqrt(466/10) ≈ 6.8; allow 4 sd.
    expect(Math.abs(n - 466)).toBeLessThan(4 * Math.sqrt(466 / 10));
    const gpu = mean(runs.map((r) => (r.byKind['Faulty GPU'] ?? 0)));
    expect(Math.abs(gpu - 148)).toBeLessThan(4 * Math.sqrt(148 / 10));
  });

  it('ETTR lands above 90 % and matches the first-order waste model', () => {
    for (const r of runs) expect(r.ettr).toBeGreaterThan(0.9);
    // Young: tau = sqrt(2·C·M); per unplanned failure half a (tau + C) cycle is lost plus
    // detection and restart; a planned stop costs a checkpoint and a restart.
    const tau = Math.sqrt((2 * C) / UNPLANNED);
    expect(runs[0]!.intervalSeconds).toBeCloseTo(tau, 6);
    const expected = (tau / (tau + C)) * (1 - UNPLANNED * ((tau + C) / 2 + 300) - PLANNED * (C + 240));
    expect(Math.abs(mean(runs.map((r) => r.ettr)) - expected)).toBeLessThan(0.003);
    // Lost GPU-hours are the non-useful wall time on every GPU.
    expect(runs[0]!.gpuHoursLost).toBeCloseTo(((H - runs[0]!.usefulSeconds) * 16384) / 3600, 3);
  });

  it('node replacement without hot spares costs ETTR on the same failures', () => {
    const without = simulate({ ...recovery, hotSpares: 0, replaceSeconds: 1800, seed: 100 });
    // Same unplanned failures (maintenance falling into a longer outage is absorbed by it).
    const unplanned = (r: typeof without) => r.interruptions - (r.byKind['Planned maintenance'] ?? 0);
    expect(unplanned(without)).toBe(unplanned(runs[0]!));
    expect(without.lost.replacement).toBeGreaterThan(0);
    expect(without.ettr).toBeLessThan(runs[0]!.ettr - 0.05);
    expect(runs[0]!.lost.replacement).toBe(0);
  });

  it('the same seed replays exactly; another seed differs', () => {
    expect(simulate({ ...recovery, seed: 100 })).toEqual(runs[0]);
    expect(simulate({ ...recovery, seed: 101 })).toEqual(runs[1]);
    expect(runs[1]!.ettr).not.toBe(runs[0]!.ettr);
    const g = simulate({ ...recovery, seed: 100, tokensPerSecond: 2e6 });
    expect(g.goodputTokensPerSecond).toBeCloseTo(2e6 * runs[0]!.ettr, 6);
  });
});

describe('per-kind recovery', () => {
  it('charges each kind its own detection time; wall time splits into useful and lost parts', () => {
    // Two rare kinds (0.2 a day each on 1000 GPUs), so outages do not overlap.
    const rate = 0.2 / 24 / 1000;
    const r = simulate({
      gpus: 1000, hours: 30 * 24, checkpointIntervalSeconds: 3600, checkpointSeconds: 20, detectSeconds: 60, restartSeconds: 240, seed: 4,
      faults: [{ name: 'slow', ratePerGpuHour: rate, detectSeconds: 3000 }, { name: 'fast', ratePerGpuHour: rate }],
    });
    const slow = r.byKind.slow ?? 0;
    const fast = r.byKind.fast ?? 0;
    expect(slow + fast).toBe(r.interruptions);
    expect(slow).toBeGreaterThan(0);
    expect(r.lost.detectAndRestart).toBe(slow * (3000 + 240) + fast * (60 + 240));
    const { checkpointing, rework, detectAndRestart, replacement } = r.lost;
    expect(r.usefulSeconds + checkpointing + rework + detectAndRestart + replacement).toBeCloseTo(30 * 24 * 3600, 3);
  });
});

describe('sweep of the checkpoint interval', () => {
  it('the simulated optimum matches Young/Daly within the confidence interval', () => {
    const C = 30;
    const young = Math.sqrt((2 * C) / UNPLANNED); // 817 s
    const M = 1 / UNPLANNED;
    const daly = Math.sqrt(2 * C * M) * (1 + Math.sqrt(C / (2 * M)) / 3 + C / (18 * M)) - C;
    // A grid that does not contain Young's value: 100 s .. 3000 s every 100 s.
    const intervals = Array.from({ length: 30 }, (_, i) => 100 * (i + 1));
    const r = sweep({ checkpointSeconds: C, hotSpares: 64, seeds: 12, seed: 7, intervals });
    expect(r.youngIntervalSeconds).toBeCloseTo(young, 6);
    expect(r.dalyIntervalSeconds).toBeCloseTo(daly, 6);
    const { min, max } = r.indistinguishable;
    // The optimum is resolved (not flat over the grid) ...
    expect(min).toBeGreaterThan(100);
    expect(max).toBeLessThan(3000);
    expect(max / min).toBeLessThan(2.5);
    // ... and Young's and Daly's intervals fall inside it, up to the grid step.
    for (const tau of [young, daly]) {
      expect(tau).toBeGreaterThanOrEqual(min - 100);
      expect(tau).toBeLessThanOrEqual(max + 100);
    }
    expect(Math.abs(r.optimum.intervalSeconds - young)).toBeLessThanOrEqual(max - min + 100);
  });
});

describe('bad input', () => {
  const bad = (fn: () => unknown, match: RegExp) => {
    try { fn(); } catch (err) {
      expect(isNcclNodeError(err, 'ERR_INVALID_ARGUMENT')).toBe(true);
      expect((err as Error).message).toMatch(match);
      return;
    }
    throw new Error('expected an error');
  };
  it('is ERR_INVALID_ARGUMENT naming the field', () => {
    bad(() => simulate({ gpus: -4 }), /gpus/);
    bad(() => simulate({ hours: 0 }), /hours/);
    bad(() => simulate({ checkpointSeconds: 0 }), /checkpoint interval/);
    bad(() => simulate({ checkpointIntervalSeconds: 1e-6 }), /checkpoint interval/);
    bad(() => simulate({ faults: [{ name: 'x', ratePerGpuHour: -1 }] }), /faults\.0\.ratePerGpuHour/);
    bad(() => simulate({ bogus: 1 } as never), /bogus|Unrecognized/);
    bad(() => sweep({ seeds: 1 }), /seeds/);
    bad(() => sweep({ intervals: [100] }), /intervals/);
  });
});

describe('nccl-node simulate', () => {
  it('--json prints the API result; bad flags exit 2', () => {
    const out = execFileSync('node', ['bin/nccl-node.js', 'simulate', '--checkpoint-seconds', '10', '--hot-spares', '64', '--seed', '5', '--json'], { encoding: 'utf8' });
    expect(JSON.parse(out)).toEqual(JSON.parse(JSON.stringify(simulate({ checkpointSeconds: 10, hotSpares: 64, seed: 5 }))));
    const badRun = spawnSync('node', ['bin/nccl-node.js', 'simulate', '--gpus', '0'], { encoding: 'utf8' });
    expect(badRun.status).toBe(2);
    expect(badRun.stderr).toMatch(/ERR_INVALID_ARGUMENT.*gpus/);
  }, 60_000);
});
