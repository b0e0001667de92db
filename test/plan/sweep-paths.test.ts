/**
 * sweepPaths(): recovery path × hot spares × checkpoint interval. Its points are the
 * means of simulate() over the same seeds; its per-path optimum interval matches the
 * renewal closed form's argmax (test/plan/simulate-ladder.test.ts derives it) up to the
 * confidence interval; the paths and spare counts order as expected; the CLI prints
 * the same result and plots one line per path (SVG parsed by Python's XML parser).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { simulate, sweepPaths, type SimulateInput } from '../../src/plan/index.js';
import { isNcclNodeError } from '../../src/errors.js';
import { repoRoot } from '../helpers/ranks.js';

const dir = mkdtempSync(join(tmpdir(), 'nccl-node-sweep-paths-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const lambda = 1 / 7200;
const C = 20, sigma = 10, every = 6, m = 0.5, D = 30, R = 300;
const s = every * sigma;
const input: SimulateInput = {
  gpus: 64, gpusPerNode: 8, hours: 2000, checkpointSeconds: C, detectSeconds: D, restartSeconds: R,
  stepSeconds: sigma, snapshotEverySteps: every, snapshotSeconds: m, seed: 21, faults: [{ name: 'software', ratePerGpuHour: (lambda * 3600) / 64 }],
};
const intervals = [300, 600, 1200, 2400, 4800, 9600];
const E = (a: number, outage: number) => ((Math.exp(lambda * a) - 1) * Math.exp(lambda * outage)) / lambda;
const fullRestart = (tau: number) => tau / E(tau + C, D + R);

describe('sweep over recovery paths', () => {
  const r = sweepPaths({ ...input, intervals, seeds: 8 });

  it('each point is the mean of simulate() over the same seeds', () => {
    expect(r.points).toHaveLength(3 * intervals.length);
    const p = r.points.find((q) => q.path === 'in-memory' && q.intervalSeconds === 1200)!;
    const direct = Array.from({ length: 8 }, (_, i) => simulate({ ...input, recoveryPath: 'in-memory', checkpointIntervalSeconds: 1200, seed: 21 + i }).ettr);
    expect(p.meanEttr).toBeCloseTo(direct.reduce((a, b) => a + b) / 8, 12);
    expect(sweepPaths({ ...input, intervals, seeds: 8 })).toEqual(r);
  });

  it('full restart: the best interval is the closed form\'s best on the grid, up to the confidence interval', () => {
    const best = r.best.find((p) => p.path === 'full-restart')!;
    const exact = Math.max(...intervals.map(fullRestart));
    expect(fullRestart(best.intervalSeconds)).toBeGreaterThanOrEqual(exact - best.halfWidth);
    // Young's interval for this fleet: sqrt(2·20·7200) = 537 s: 600 s on this grid.
    expect(intervals.map(fullRestart).indexOf(exact)).toBe(1);
    expect(r.youngIntervalSeconds).toBeCloseTo(Math.sqrt(2 * C * 7200), 6);
  });

  it('in-process beats in-memory beats full restart at each one\'s best interval; the optimum is in-process', () => {
    const at = (path: string) => r.best.find((p) => p.path === path)!;
    expect(at('in-process').meanEttr).toBeGreaterThan(at('in-memory').meanEttr);
    expect(at('in-memory').meanEttr).toBeGreaterThan(at('full-restart').meanEttr);
    expect(r.optimum.path).toBe('in-process');
    // Failures rarely need the disk checkpoint there, so it is taken as rarely as the grid allows.
    expect(at('in-memory').intervalSeconds).toBeGreaterThanOrEqual(4800);
    expect(r.indistinguishable.every((p) => p.path === 'in-process')).toBe(true);
  });

  it('spares: with lost nodes and no spares the full restart waits for a replacement', () => {
    // Spares back after 4 h: about two lost nodes in that time, so 4 spares always have one free.
    const hw: SimulateInput = { ...input, replaceSeconds: 1800, spareRepairHours: 4, faults: [{ name: 'node', ratePerGpuHour: (lambda * 3600) / 64, hardware: true }] };
    const sp = sweepPaths({ ...hw, paths: ['full-restart', 'in-process'], spares: [0, 4], intervals: [600], seeds: 4 });
    const at = (path: string, n: number) => sp.best.find((p) => p.path === path && p.hotSpares === n)!;
    expect(at('full-restart', 4).meanEttr).toBeGreaterThan(at('full-restart', 0).meanEttr + 0.1);
    expect(at('in-process', 4).byRung['restart-in-place']).toBeGreaterThan(0);
    expect(at('in-process', 0).byRung['restart-in-place']).toBe(0);
    expect(sp.optimum).toMatchObject({ path: 'in-process', hotSpares: 4 });
  });

  it('bad input is ERR_INVALID_ARGUMENT', () => {
    const bad = (f: () => unknown, re: RegExp) => {
      try { f(); } catch (err) { expect(isNcclNodeError(err, 'ERR_INVALID_ARGUMENT')).toBe(true); expect((err as Error).message).toMatch(re); return; }
      throw new Error('expected an error');
    };
    bad(() => sweepPaths({ ...input, paths: ['teleport' as never] }), /paths\.0/);
    bad(() => sweepPaths({ ...input, spares: [-1] }), /spares\.0/);
    bad(() => sweepPaths({ ...input, recoveryPath: 'in-memory' }), /recoveryPath/);
  });
});

describe('nccl-node simulate --sweep --paths', () => {
  it('--json prints the API result; --svg plots one line per path', () => {
    // Llama 3's fault mix, 400 times as often (a failure every ~2 h on 64 GPUs).
    const args = ['--gpus', '64', '--hours', '500', '--rate-scale', '400', '--hot-spares', '4', '--spare-repair-hours', '4', '--checkpoint-seconds', '20', '--detect-seconds', '30', '--restart-seconds', '300',
      '--step-seconds', '10', '--snapshot-every', '6', '--snapshot-seconds', '0.5', '--seed', '3', '--seeds', '3', '--intervals', '600,2400'];
    const out = execFileSync(process.execPath, [join(repoRoot, 'bin/nccl-node.js'), 'simulate', ...args, '--sweep', '--paths', 'full-restart,in-process', '--spares', '0,2', '--json'], { encoding: 'utf8' });
    const api = sweepPaths({
      gpus: 64, hours: 500, rateScale: 400, hotSpares: 4, spareRepairHours: 4, checkpointSeconds: 20, detectSeconds: 30, restartSeconds: 300, stepSeconds: 10, snapshotEverySteps: 6, snapshotSeconds: 0.5,
      seed: 3, seeds: 3, intervals: [600, 2400], paths: ['full-restart', 'in-process'], spares: [0, 2],
    });
    expect(JSON.parse(out)).toEqual(JSON.parse(JSON.stringify(api)));
    const svgDir = join(dir, 'svg');
    const r = spawnSync(process.execPath, [join(repoRoot, 'bin/nccl-node.js'), 'simulate', ...args, '--sweep', '--paths', 'full-restart,in-memory,in-process', '--svg', svgDir], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/optimum\s+in-process, 4 spares/);
    const py = `
import json, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
print(json.dumps([e.get("aria-roledescription") for e in root.iter() if e.get("role") == "graphics-symbol"]))`;
    const roles = JSON.parse(execFileSync('python3', ['-c', py, join(svgDir, 'goodput-vs-interval-by-path.svg')], { encoding: 'utf8' })) as string[];
    expect(roles.filter((x) => x === 'point')).toHaveLength(3 * 2);
    expect(roles.filter((x) => x === 'line mark')).toHaveLength(3);
  }, 60_000);
});
