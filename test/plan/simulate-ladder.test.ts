/**
 * simulate() along each recovery path against closed forms computed here: with
 * exponential failures at rate λ and a fixed outage R that a failure during it starts
 * again, completing a stretch of a seconds without a failure takes on average
 * E(a) = (e^{λa} − 1)·e^{λR}/λ (the renewal argument behind Young's and Daly's
 * intervals). Each path repeats a different stretch after a failure:
 * - full restart: the whole interval and checkpoint, τ + C (first order: a loss of
 *   R + (τ + C)/2 per failure);
 * - in-memory: from the last snapshot, stretches of s + m (snapshot every s of work,
 *   stall m), the last one s + C;
 * - in-process: the step in flight, stretches of one step σ, plus each stall.
 * ETTR = τ / Σ E(stretch) must lie within the seeds' 95 % t-interval of the simulated
 * mean. Also: the ladder's fallbacks, per-rung costs read from a recovery benchmark's
 * JSON and scaled by the documented rule, bad files, exact replay.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { isNcclNodeError } from '../../src/errors.js';
import { readRecoveryCosts, scaleOf, simulate, type SimulateInput } from '../../src/plan/index.js';
import { chooseRung, type LadderState } from '../../src/plan/recovery-policy.js';
import { repoRoot } from '../helpers/ranks.js';

const dir = mkdtempSync(join(tmpdir(), 'nccl-node-sim-ladder-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const cli = (args: string[]) => spawnSync(process.execPath, [join(repoRoot, 'bin/nccl-node.js'), 'simulate', ...args], { encoding: 'utf8', timeout: 50_000 });

const SEEDS = 16;
const T975_DF15 = 2.131; // Student t, 97.5 % quantile, 15 degrees of freedom
function ci(xs: number[]): { mean: number; half: number } {
  const mean = xs.reduce((s, x) => s + x, 0) / xs.length;
  const sd = Math.sqrt(xs.reduce((s, x) => s + (x - mean) ** 2, 0) / (xs.length - 1));
  return { mean, half: (T975_DF15 * sd) / Math.sqrt(xs.length) };
}

// 64 GPUs on 8 nodes, one software fault kind, the fleet failing every 2 h on average.
const lambda = 1 / 7200;
const tau = 1200, C = 20, sigma = 10, every = 6, m = 2, D = 30, R = 300;
const s = every * sigma;
const base: SimulateInput = {
  gpus: 64, gpusPerNode: 8, hours: 3000, checkpointIntervalSeconds: tau, checkpointSeconds: C, detectSeconds: D, restartSeconds: R,
  stepSeconds: sigma, snapshotEverySteps: every, snapshotSeconds: m, faults: [{ name: 'software', ratePerGpuHour: (lambda * 3600) / 64 }],
};
const E = (a: number, outage: number) => ((Math.exp(lambda * a) - 1) * Math.exp(lambda * outage)) / lambda;
// Outages from the documented defaults: detect + restart; detect + the restart scaled by the
// benchmark's memory-over-disk restore (2013 ms / 2406 ms, docs/launcher.md); detect + the
// 76 ms membership round × log2(8 nodes).
const outage = { 'full-restart': D + R, 'in-memory': D + (R * 2013) / 2406, 'in-process': D + 0.076 * Math.log2(8) };
const K = tau / s - 1; // snapshots per interval
const expected = {
  'full-restart': tau / E(tau + C, outage['full-restart']),
  'in-memory': tau / (K * E(s + m, outage['in-memory']) + E(s + C, outage['in-memory'])),
  'in-process': tau / ((tau / sigma) * E(sigma, outage['in-process']) + K * E(m, outage['in-process']) + E(C, outage['in-process'])),
};

describe('each recovery path against its closed form', () => {
  const runs = Object.fromEntries((['full-restart', 'in-memory', 'in-process'] as const).map((path) =>
    [path, Array.from({ length: SEEDS }, (_, i) => simulate({ ...base, recoveryPath: path, seed: 11 + i }))]));

  for (const path of ['full-restart', 'in-memory', 'in-process'] as const) {
    it(`${path}: mean ETTR within the 95 % interval of ${expected[path].toFixed(4)}; every failure takes the path's rung`, () => {
      const { mean, half } = ci(runs[path]!.map((r) => r.ettr));
      expect(Math.abs(mean - expected[path]), `mean ${mean} ± ${half}`).toBeLessThanOrEqual(half);
      const rung = path === 'in-process' ? 'restart-in-place' : path;
      for (const r of runs[path]!) {
        expect(r.byRung[rung]).toBe(r.interruptions);
        expect(r.recoveryPath).toBe(path);
      }
      expect(runs[path]![0]!.rungSeconds[rung].software).toBeCloseTo(outage[path], 9);
    });
  }

  it('orders the paths in-process > in-memory > full restart, seed by seed, on the same failures', () => {
    expect(expected['in-process']).toBeGreaterThan(expected['in-memory']);
    expect(expected['in-memory']).toBeGreaterThan(expected['full-restart']);
    for (let i = 0; i < SEEDS; i++) {
      const [f, mem, proc] = [runs['full-restart']![i]!, runs['in-memory']![i]!, runs['in-process']![i]!];
      expect(mem.interruptions).toBe(f.interruptions);
      expect(proc.interruptions).toBe(f.interruptions);
      expect(proc.ettr).toBeGreaterThan(mem.ettr);
      expect(mem.ettr).toBeGreaterThan(f.ettr);
    }
  });

  it('wall time splits into useful work and the lost parts on every path', () => {
    for (const rs of Object.values(runs)) {
      const r = rs[0]!;
      const l = r.lost;
      expect(r.usefulSeconds + l.checkpointing + l.rework + l.detectAndRestart + l.replacement + l.snapshots + l.shrunk).toBeCloseTo(r.wallSeconds, 3);
    }
    // Snapshot stalls: about m per s of work (less the ones the durable checkpoint replaces).
    const r = runs['in-memory']![0]!;
    expect(r.lost.snapshots / r.usefulSeconds).toBeCloseTo((K * m) / tau, 2);
    expect(runs['full-restart']![0]!.lost.snapshots).toBe(0);
  });

  it('the same seed replays exactly', () => {
    for (const path of ['full-restart', 'in-memory', 'in-process'] as const) {
      expect(simulate({ ...base, recoveryPath: path, seed: 11 })).toEqual(runs[path]![0]);
    }
  });
});

describe('falling back a rung', () => {
  const ls = (o: Partial<LadderState>): LadderState => ({
    path: 'in-process', hardware: true, transient: false, spareFree: false, slack: false, ownCopy: true, peerCopy: true, ...o,
  });
  it('chooses per the ladder: retry, restart in place, shrink, in-memory, full restart', () => {
    expect(chooseRung(ls({ hardware: false, transient: true })).rung).toBe('retry');
    expect(chooseRung(ls({ hardware: false })).rung).toBe('restart-in-place');
    expect(chooseRung(ls({ spareFree: true }))).toEqual({ rung: 'restart-in-place', spare: true });
    expect(chooseRung(ls({ slack: true })).rung).toBe('shrink');
    expect(chooseRung(ls({})).rung).toBe('in-memory');
    // A lost node's own copy is gone with it: only the peer's counts.
    expect(chooseRung(ls({ peerCopy: false })).rung).toBe('full-restart');
    expect(chooseRung(ls({ path: 'in-memory', hardware: false, peerCopy: false })).rung).toBe('in-memory');
    expect(chooseRung(ls({ path: 'in-memory', hardware: false, ownCopy: false, peerCopy: false })).rung).toBe('full-restart');
    expect(chooseRung(ls({ path: 'in-memory', transient: true, hardware: false })).rung).toBe('in-memory');
    expect(chooseRung(ls({ path: 'full-restart', spareFree: true, slack: true })).rung).toBe('full-restart');
  });

  // Rare faults (0.1 an hour in all) so outages do not overlap.
  const rare = (hardware: number, software: number): SimulateInput => ({
    ...base, snapshotSeconds: 0, hours: 2000, replaceSeconds: 600,
    faults: [{ name: 'node', ratePerGpuHour: hardware / 64, hardware: true }, { name: 'process', ratePerGpuHour: software / 64 }].filter((f) => f.ratePerGpuHour > 0),
  });

  it('one node: a lost node takes both copies, so in-memory falls back to disk; a software fault does not', () => {
    const r = simulate({ ...rare(0.05, 0.05), gpusPerNode: 64, recoveryPath: 'in-memory', seed: 3 });
    expect(r.byKind.node).toBeGreaterThan(20);
    expect(r.byRung['full-restart']).toBe(r.byKind.node);
    expect(r.byRung['in-memory']).toBe(r.byKind.process);
    // No spares: each lost node also waits for its replacement (one that fails during
    // another's outage extends that outage instead).
    expect(r.lost.replacement).toBeGreaterThan(0.9 * 600 * r.byKind.node!);
    expect(r.lost.replacement).toBeLessThanOrEqual(600 * r.byKind.node!);
  });

  it('in-memory falls back to disk as often as a lost node\'s ring peer failed since the last snapshot', () => {
    // Lost nodes only, always a spare. A failure finds the last snapshot older than the
    // previous failure with probability q = 1 − e^{−λs} (s of training after each
    // resume before the next snapshot), so failures come in runs: the k-th of a run
    // (fraction (1 − q)·q^{k−1}) falls back if one of the k − 1 before it hit its peer,
    // each with probability 1/N: P = 1 − (1 − q) / (1 − q·(1 − 1/N)).
    const lam = 1 / 3600, snap = 1800; // q = 0.39: runs are common (P at 2 nodes 0.245, against q/2 = 0.197 counting the previous failure only)
    const q = 1 - Math.exp(-lam * snap);
    for (const nodes of [2, 8]) {
      let fallbacks = 0, failures = 0;
      for (const seed of [1, 2, 3]) {
        const r = simulate({
          gpus: 8 * nodes, gpusPerNode: 8, hours: 2000, checkpointIntervalSeconds: 7200, checkpointSeconds: 0, detectSeconds: 30, restartSeconds: 60,
          stepSeconds: 60, snapshotEverySteps: 30, hotSpares: 100, spareRepairHours: 1, recoveryPath: 'in-memory', seed,
          faults: [{ name: 'node', ratePerGpuHour: (lam * 3600) / (8 * nodes), hardware: true }],
        });
        expect(r.byRung['in-memory'] + r.byRung['full-restart']).toBe(r.interruptions);
        fallbacks += r.byRung['full-restart'];
        failures += r.interruptions;
      }
      const p = 1 - (1 - q) / (1 - q * (1 - 1 / nodes));
      expect(Math.abs(fallbacks - failures * p), `${nodes} nodes: ${fallbacks} of ${failures}, expected ${failures * p}`)
        .toBeLessThan(4 * Math.sqrt(failures * p * (1 - p)));
    }
  });

  it('in-process without spare or slack on one node follows the full-restart run', () => {
    const inProcess = simulate({ ...rare(0.1, 0), gpusPerNode: 64, recoveryPath: 'in-process', seed: 5 });
    const full = simulate({ ...rare(0.1, 0), gpusPerNode: 64, recoveryPath: 'full-restart', seed: 5 });
    expect(inProcess.byRung['full-restart']).toBe(inProcess.interruptions);
    expect(inProcess.ettr).toBeCloseTo(full.ettr, 9);
    expect(inProcess.lost.rework).toBeCloseTo(full.lost.rework, 3);
  });

  it('in-process: a hot spare swaps in; without one the job shrinks on slack; without slack it restores from memory', () => {
    const spares = simulate({ ...rare(0.05, 0), recoveryPath: 'in-process', hotSpares: 1000, seed: 8 });
    expect(spares.byRung['restart-in-place']).toBe(spares.interruptions);
    expect(spares.lost.replacement).toBe(0);
    const shrink = simulate({ ...rare(0.05, 0), recoveryPath: 'in-process', shrinkSlackNodes: 8, seed: 8 });
    expect(shrink.byRung.shrink).toBe(shrink.interruptions);
    expect(shrink.byRung.grow).toBe(shrink.interruptions);
    // A node short for the 600 s replacement: 1/8 of the job's throughput each time.
    expect(shrink.lost.shrunk).toBeCloseTo((shrink.interruptions * 600) / 8, 6);
    const none = simulate({ ...rare(0.05, 0), recoveryPath: 'in-process', seed: 8 });
    expect(none.byRung['in-memory'] + none.byRung['full-restart']).toBe(none.interruptions);
    expect(none.byRung['in-memory']).toBeGreaterThan(0.9 * none.interruptions);
    expect(spares.ettr).toBeGreaterThan(shrink.ettr);
    expect(shrink.ettr).toBeGreaterThan(none.ettr);
  });

  it('a transient fault is retried in-process: it loses the step in flight and the timeout', () => {
    const r = simulate({ ...base, snapshotSeconds: 0, recoveryPath: 'in-process', seed: 2, faults: [{ name: 'timeout', ratePerGpuHour: 0.1 / 64, transient: true }] });
    expect(r.byRung.retry).toBe(r.interruptions);
    expect(r.rungSeconds.retry.software).toBeCloseTo(D + 0.0005, 9);
    // Half a step lost per failure on average (uniform within the step): within 4 standard errors.
    const n = r.interruptions;
    expect(Math.abs(r.lost.rework / n - sigma / 2)).toBeLessThan(4 * (sigma / Math.sqrt(12)) / Math.sqrt(n));
  });
});

describe('per-rung costs from the recovery benchmark', () => {
  // bench/ft/recovery.ts --json rows (times in ms) at 2 and 4 ranks: the 4-rank ones are used.
  const row = (ranks: number, fault: string, restore: string, trial: number, ph: [number, number, number | null, number, number]) => ({
    ranks, fault, restore, trial, restart: true, totalMs: ph.reduce<number>((a, b) => a + (b ?? 0), 0),
    phases: { detect: ph[0], abort: ph[1], rendezvous: ph[2], restore: ph[3], firstStep: ph[4] },
  });
  const bench = {
    machine: { cpus: 2 }, stepMs: 40,
    rows: [
      row(2, 'kill-rank', 'disk', 0, [1, 1, 1, 1, 41]),
      row(4, 'kill-rank', 'disk', 0, [14, 1600, null, 900, 90]),
      row(4, 'kill-rank', 'disk', 1, [20, 1400, null, 1100, 70]),
      row(4, 'kill-rank', 'disk', 2, [16, 1500, null, 1000, 80]),
      row(4, 'kill-node', 'disk', 0, [140, 300, 1500, 2200, 60]),
      row(4, 'kill-node', 'disk', 1, [100, 500, 1300, 2000, 40]),
      row(4, 'kill-rank', 'memory', 0, [15, 300, null, 800, 60]),
      // In-process: abort until the survivors train shrunk, rendezvous until the rank is back.
      row(4, 'hang', 'in-process', 0, [800, 900, 1700, 0, 50]),
      // A killed node takes the gang's path even there: not an in-process cost.
      row(4, 'kill-node', 'in-process', 0, [100, 400, 1500, 2000, 60]),
      { ranks: 4, fault: 'partition', restore: 'disk', trial: 0, restart: false, totalMs: 3200, phases: { detect: null, abort: null, rendezvous: null, restore: null, firstStep: 3200 } },
    ],
  };
  const file = join(dir, 'ft.json');
  writeFileSync(file, JSON.stringify(bench));
  const at: SimulateInput = { ...base, gpus: 1024, gpusPerNode: 8, detectSeconds: 60, stateBytes: 4e12, storageBandwidth: 2e11, networkBandwidth: 5e10 };

  it('takes the median per phase per fault × restore path and scales it by the documented rule', () => {
    const { costs, sources } = readRecoveryCosts(file, scaleOf(at));
    const nodes = 128;
    // Full restart, software fault: the kill-rank disk rows at 4 ranks; medians (upper middle for two) by hand.
    expect(sources['full-restart']!.software).toMatchObject({ restore: 'disk', fault: 'kill-rank', ranks: 4, trials: 3 });
    const fr = costs['full-restart']!.software!;
    expect(fr.detect).toBeCloseTo((16 / 1000) * 60, 9); // × heartbeat timeout 60 s / the benchmark's 1 s
    expect(fr.abort).toBeCloseTo(1.5, 9);
    expect(fr.rendezvous).toBe(0);
    expect(fr.restore).toBeCloseTo(1.0 + 4e12 / nodes / (2e11 / nodes), 9); // + a node's share over its share of storage
    expect(fr.firstStep).toBeCloseTo((80 - 40) / 1000, 9);
    const hw = costs['full-restart']!.hardware!;
    expect(hw.detect).toBeCloseTo(0.14 * 60, 9);
    expect(hw.rendezvous).toBeCloseTo(1.5 * Math.log2(nodes), 9); // log2(128 nodes) / log2(2 nodes)
    expect(hw.restore).toBeCloseTo(2.2 + 20, 9);
    expect(hw.firstStep).toBeCloseTo(0.02, 9);
    // In-memory: the memory rows, the peer's copy over the network.
    expect(costs['in-memory']!.software!.restore).toBeCloseTo(0.8 + 4e12 / nodes / 5e10, 9);
    expect(sources['in-memory']!.hardware.fault).toBe('any');
    // In-process rows cost both in-process rungs for both classes (rank faults only);
    // a shrunk job trains while the rank rejoins, so the shrink's outage leaves that out.
    const rip = costs['restart-in-place']!;
    expect(sources['restart-in-place']!.hardware).toMatchObject({ fault: 'hang', trials: 1 });
    expect(rip.hardware).toEqual(rip.software);
    expect(rip.software.detect).toBeCloseTo(0.8 * 60, 9);
    expect(rip.software.abort).toBeCloseTo(0.9, 9);
    expect(rip.software.rendezvous).toBeCloseTo(1.7 * 7, 9);
    expect(rip.software.restore).toBeCloseTo(4e12 / nodes / 5e10, 9);
    expect(costs.shrink!.software).toEqual({ ...rip.software, rendezvous: 0, restore: 0 });
    // Retry and grow are not measured: they keep their defaults.
    expect(costs.retry).toBeUndefined();
    expect(costs.grow).toBeUndefined();
  });

  it('the simulation charges those costs per failure', () => {
    const { costs } = readRecoveryCosts(file, scaleOf(at));
    const rare: SimulateInput = { ...at, hours: 500, faults: [{ name: 'process', ratePerGpuHour: 0.05 / 1024 }] };
    const fromFile = simulate({ ...rare, recoveryCosts: costs, seed: 4 });
    const byDefault = simulate({ ...rare, seed: 4 });
    const fr = costs['full-restart']!.software!;
    const each = fr.detect + fr.abort + fr.rendezvous + fr.restore + fr.firstStep;
    expect(fromFile.rungSeconds['full-restart'].software).toBeCloseTo(each, 9);
    expect(fromFile.interruptions).toBeGreaterThan(10);
    expect(fromFile.lost.detectAndRestart).toBeCloseTo(fromFile.interruptions * each, 6);
    expect(byDefault.lost.detectAndRestart).toBeCloseTo(byDefault.interruptions * (60 + R), 6);
    expect(fromFile.ettr).toBeGreaterThan(byDefault.ettr);
  });

  it('the CLI reads the file: --json reports the costs used and where they came from', () => {
    const r = cli(['--gpus', '1024', '--hours', '500', '--detect-seconds', '60', '--state-bytes', '4e12', '--storage-bw', '2e11',
      '--recovery-path', 'in-memory', '--recovery-costs', file, '--seed', '4', '--json']);
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { rungSeconds: Record<string, { software: number }>; recoveryCostsFrom: { sources: Record<string, unknown> } };
    expect(out.rungSeconds['in-memory']!.software).toBeCloseTo(0.015 * 60 + 0.3 + 0.8 + 4e12 / 128 / 5e10 + 0.02, 6);
    expect(Object.keys(out.recoveryCostsFrom.sources).sort()).toEqual(['full-restart', 'in-memory', 'restart-in-place', 'shrink']);
  }, 60_000);

  it('a malformed file is ERR_INVALID_ARGUMENT naming the field; the CLI exits 2', () => {
    const scale = scaleOf(at);
    const bad = (content: string, match: RegExp) => {
      const f = join(dir, `bad-${Math.random().toString(36).slice(2)}.json`);
      writeFileSync(f, content);
      try {
        readRecoveryCosts(f, scale);
      } catch (err) {
        expect(isNcclNodeError(err, 'ERR_INVALID_ARGUMENT')).toBe(true);
        expect((err as Error).message).toMatch(match);
        return f;
      }
      throw new Error('expected an error');
    };
    bad('{"rows": [', /expected a readable JSON file/);
    bad('{"rows": []}', /rows/);
    bad(JSON.stringify({ rows: [{ ...bench.rows[1], restore: 'tape' }] }), /rows\.0\.restore/);
    bad(JSON.stringify({ rows: [{ ...bench.rows[1], phases: { detect: -5 } }] }), /rows\.0\.phases\.detect/);
    const f = bad(JSON.stringify({ rows: [{ ...bench.rows[1], ranks: 'four' }] }), /rows\.0\.ranks/);
    expect(() => readRecoveryCosts(join(dir, 'missing.json'), scale)).toThrow(/readable JSON/);
    expect(() => scaleOf({ stateBytes: 1e12 })).toThrow(/storageBandwidth/);
    const r = cli(['--recovery-costs', f]);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/\[ERR_INVALID_ARGUMENT\].*rows\.0\.ranks/);
  }, 60_000);
});
