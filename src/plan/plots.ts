/**
 * Plots of a plan or a checkpoint-interval sweep, as Vega-Lite charts rendered to
 * standalone SVG by the POC report's renderer (src/poc/report.ts):
 * - goodput vs checkpoint interval (plan: the first-order ETTR model around Young's
 *   interval; simulate: the sweep's mean ETTR per interval, one line per recovery path
 *   and spare count for a path sweep);
 * - MFU vs data-parallel size (plan() re-run with the chosen layout at dp = 1, 2, 4, …);
 * - memory per GPU per layout (the chosen layout and the search's alternatives,
 *   stacked by weights, gradients, optimizer state and activations).
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { renderSvg, type Plot } from '../poc/report.js';
import { plan, type PlanResult } from './plan.js';
import { firstOrderEttr } from './reliability.js';
import { parseInput, planSchema, type PlanInput } from './schema.js';
import type { SweepResult } from './sweep.js';
import type { PathSweepResult } from './sweep-paths.js';

/** Multiples of Young's interval the plan's goodput curve is drawn at. */
export const INTERVAL_FACTORS = [0.25, 0.35, 0.5, 0.71, 1, 1.41, 2, 2.83, 4];

const line = (title: string, x: string, xTitle: string, y: string, yTitle: string, ticks?: number[]) => ({
  title,
  mark: { type: 'line', point: true },
  encoding: {
    x: { field: x, type: 'quantitative', title: xTitle, scale: { type: 'log', base: 2 }, ...(ticks ? { axis: { values: ticks, format: 'd' } } : {}) },
    y: { field: y, type: 'quantitative', title: yTitle },
  },
});

function goodputPlot(title: string, rows: { intervalSeconds: number; goodput: number }[], unit: string): Plot {
  return { id: 'goodput-vs-interval', title, spec: line(title, 'intervalSeconds', 'checkpoint interval (s)', 'goodput', unit), rows };
}

const layoutName = (l: { dp: number; tp: number; pp: number }) => `dp${l.dp} tp${l.tp} pp${l.pp}`;

export function planPlots(input: PlanInput, r: PlanResult): Plot[] {
  const o = parseInput('plan', planSchema, input);
  const C = r.checkpoint.costSeconds, M = r.reliability.fleetMtbfSeconds, young = r.reliability.youngIntervalSeconds;
  const goodput = INTERVAL_FACTORS.map((f) => {
    const tau = f * young;
    return { intervalSeconds: tau, goodput: r.tokensPerSecond * firstOrderEttr(tau, C, M, o.restartSeconds) };
  });

  const l = r.best.layout;
  const dps: number[] = [];
  for (let d = 1; d < l.dp; d *= 2) dps.push(d);
  dps.push(l.dp);
  const mfu = dps.flatMap((dp) => {
    const e = plan({ ...input, cluster: { ...input.cluster, count: dp * l.tp * l.pp }, layout: { ...l, dp } }).best;
    return e.mfu === null ? [] : [{ dp, mfu: 100 * e.mfu }];
  });

  const memory = [r.best, ...r.alternatives].flatMap((e) => (['weights', 'grads', 'optimizer', 'activations'] as const).map((part) => ({
    layout: layoutName(e.layout), part, gigabytes: (e.memory[part] ?? 0) / 1e9,
  })));
  const mfuTitle = `MFU vs data-parallel size (tp ${l.tp}, pp ${l.pp})`;
  const memTitle = `Memory per GPU per layout (${r.gpu.name})`;
  return [
    goodputPlot(`Goodput vs checkpoint interval (first-order ETTR, C ${C.toPrecision(3)} s, MTBF ${M.toPrecision(3)} s)`, goodput, 'goodput (tokens/s)'),
    { id: 'mfu-vs-dp', title: mfuTitle, spec: line(mfuTitle, 'dp', 'data-parallel size', 'mfu', 'MFU (%)', dps), rows: mfu },
    {
      id: 'memory-per-layout', title: memTitle,
      spec: {
        title: memTitle,
        mark: 'bar',
        encoding: {
          x: { field: 'layout', type: 'nominal', title: 'layout', sort: null },
          y: { field: 'gigabytes', type: 'quantitative', title: 'memory per GPU (GB)', stack: 'zero' },
          color: { field: 'part', type: 'nominal', title: 'state' },
        },
      },
      rows: memory,
    },
  ];
}

/** Goodput (tokens/s × mean ETTR, or ETTR in % without a token rate) per swept interval. */
export function sweepPlots(s: SweepResult, tokensPerSecond?: number): Plot[] {
  const rows = s.points.map((p) => ({ intervalSeconds: p.intervalSeconds, goodput: tokensPerSecond === undefined ? 100 * p.meanEttr : tokensPerSecond * p.meanEttr }));
  return [goodputPlot('Goodput vs checkpoint interval (simulated, mean over seeds)', rows, tokensPerSecond === undefined ? 'ETTR (%)' : 'goodput (tokens/s)')];
}

/** Goodput per swept interval, one line per recovery path (and spare count when several were swept). */
export function pathSweepPlots(s: PathSweepResult, tokensPerSecond?: number): Plot[] {
  const many = new Set(s.points.map((p) => p.hotSpares)).size > 1;
  const rows = s.points.map((p) => ({
    intervalSeconds: p.intervalSeconds,
    goodput: tokensPerSecond === undefined ? 100 * p.meanEttr : tokensPerSecond * p.meanEttr,
    path: many ? `${p.path}, ${p.hotSpares} spares` : p.path,
  }));
  const title = 'Goodput vs checkpoint interval per recovery path (simulated, mean over seeds)';
  const spec = line(title, 'intervalSeconds', 'checkpoint interval (s)', 'goodput', tokensPerSecond === undefined ? 'ETTR (%)' : 'goodput (tokens/s)');
  return [{ id: 'goodput-vs-interval-by-path', title, spec: { ...spec, encoding: { ...spec.encoding, color: { field: 'path', type: 'nominal', title: 'recovery path' } } }, rows }];
}

/** Renders each plot to DIR/<id>.svg; returns the files written. */
export async function writePlots(dir: string, plots: readonly Plot[]): Promise<string[]> {
  await mkdir(dir, { recursive: true });
  return Promise.all(plots.map(async (p) => {
    const file = join(dir, `${p.id}.svg`);
    await writeFile(file, await renderSvg(p));
    return file;
  }));
}
