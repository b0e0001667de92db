/** Console tables for plan(), simulate() and sweep() results. */
import type { PlanResult } from './plan.js';
import type { SimulateResult } from './simulate.js';
import type { SweepResult } from './sweep.js';
import type { PathSweepResult } from './sweep-paths.js';
import type { HardwareProfile } from './profile.js';
import type { Prediction } from './predict.js';

const si = (x: number, unit = ''): string => {
  const units: [number, string][] = [[1e24, 'Y'], [1e21, 'Z'], [1e18, 'E'], [1e15, 'P'], [1e12, 'T'], [1e9, 'G'], [1e6, 'M'], [1e3, 'k']];
  for (const [f, p] of units) if (Math.abs(x) >= f) return `${(x / f).toPrecision(3)} ${p}${unit}`;
  return `${x.toPrecision(3)} ${unit}`.trim();
};
const bytes = (x: number | null) => (x === null ? 'n/a (shape unknown)' : si(x, 'B'));
const secs = (x: number | null) => {
  if (x === null) return 'n/a';
  if (x < 120) return `${x.toPrecision(3)} s`;
  if (x < 7200) return `${(x / 60).toPrecision(3)} min`;
  return `${(x / 3600).toPrecision(3)} h`;
};
const pct = (x: number | null) => (x === null ? 'n/a' : `${(100 * x).toFixed(1)} %`);

export function table(rows: readonly (readonly [string, string])[]): string {
  const w = Math.max(...rows.map(([k]) => k.length));
  return rows.map(([k, v]) => `${k.padEnd(w)}  ${v}`).join('\n') + '\n';
}

export function formatPlan(r: PlanResult): string {
  const e = r.best;
  const l = e.layout;
  const axis = (name: 'dp' | 'tp' | 'pp') => {
    const c = e.comm[name];
    return `${bytes(c.bytes)} on ${c.tier}, ${secs(c.seconds)} (${secs(c.exposedSeconds)} exposed)`;
  };
  return table([
    ['GPU', r.gpu.name],
    ['parameters', `${si(r.params)} (${r.paramsSource})`],
    ['training state', `${bytes(r.stateBytes)}; at least ${r.minGpusForState} GPUs to hold it`],
    ['layout', `dp ${l.dp} x tp ${l.tp} x pp ${l.pp}, ${l.microBatches} micro-batches of ${l.microBatchSize}, ${l.schedule}`],
    ['memory/GPU weights', bytes(e.memory.weights)],
    ['memory/GPU gradients', bytes(e.memory.grads)],
    ['memory/GPU optimizer', bytes(e.memory.optimizer)],
    ['memory/GPU activations', bytes(e.memory.activations)],
    ['memory/GPU total', `${bytes(e.memory.total)} of ${bytes(r.gpu.hbmBytes)} (${e.memory.fits ? 'fits' : 'DOES NOT FIT'})`],
    ['comm/step dp', axis('dp')],
    ['comm/step tp', axis('tp')],
    ['comm/step pp', axis('pp')],
    ['pipeline bubble', pct(e.bubble)],
    ['step time', secs(e.stepSeconds)],
    ['MFU', pct(e.mfu)],
    ['total FLOPs (6ND)', r.totalFlops.toExponential(2)],
    ['tokens/day', si(r.tokensPerDay)],
    ['days to train', r.days.toFixed(1)],
    ['checkpoint', `${bytes(r.checkpoint.bytes)}, write ${secs(r.checkpoint.writeSeconds)}, cost ${secs(r.checkpoint.costSeconds)}`],
    ['fleet MTBF', `${secs(r.reliability.fleetMtbfSeconds)} (${r.reliability.failuresPerDay.toPrecision(3)} failures/day)`],
    ['checkpoint interval', `Young ${secs(r.reliability.youngIntervalSeconds)}, Daly ${secs(r.reliability.dalyIntervalSeconds)}`],
    ['expected ETTR', `${pct(r.reliability.expectedEttr)} -> ${r.reliability.daysWithFailures.toFixed(1)} days`],
  ]);
}

export function formatSimulation(r: SimulateResult): string {
  return table([
    ['seed', String(r.seed)],
    ['checkpoint interval', secs(r.intervalSeconds)],
    ['wall time', secs(r.wallSeconds)],
    ['interruptions', String(r.interruptions)],
    ['ETTR', pct(r.ettr)],
    ['goodput', r.goodputTokensPerSecond === null ? 'n/a (give tokens/s)' : `${si(r.goodputTokensPerSecond)} tokens/s`],
    ['GPU-hours lost', si(r.gpuHoursLost)],
    ['  checkpointing', secs(r.lost.checkpointing)],
    ['  rework', secs(r.lost.rework)],
    ['  detect + restart', secs(r.lost.detectAndRestart)],
    ['  node replacement', secs(r.lost.replacement)],
    ['  in-memory snapshots', secs(r.lost.snapshots)],
    ['  running shrunk', secs(r.lost.shrunk)],
    ['recovery path', r.recoveryPath],
    ...Object.entries(r.byRung).filter(([, n]) => n > 0).map(([rung, n]): [string, string] =>
      [`  ${rung}`, `${n} x ${secs(r.rungSeconds[rung as keyof typeof r.rungSeconds].software)} (software) / ${secs(r.rungSeconds[rung as keyof typeof r.rungSeconds].hardware)} (hardware)`]),
  ]);
}

export function formatPathSweep(r: PathSweepResult): string {
  const label = (p: { path: string; hotSpares: number }) => `${p.path}, ${p.hotSpares} spares`;
  const rows: [string, string][] = r.best.map((p) => [label(p),
    `best interval ${secs(p.intervalSeconds)}: ETTR ${pct(p.meanEttr)} ± ${(100 * p.halfWidth).toFixed(2)}${p.goodputTokensPerSecond === null ? '' : `, ${si(p.goodputTokensPerSecond)} tokens/s`}`]);
  rows.push(['optimum', `${label(r.optimum)}, interval ${secs(r.optimum.intervalSeconds)}: ETTR ${pct(r.optimum.meanEttr)}`]);
  rows.push(['indistinguishable', r.indistinguishable.length === 1 ? 'none (the optimum is resolved)' : r.indistinguishable.map((p) => `${label(p)} @ ${secs(p.intervalSeconds)}`).join('; ')]);
  rows.push(['Young', `${secs(r.youngIntervalSeconds)} (${r.seeds} seeds per point)`]);
  return table(rows);
}

export function formatSweep(r: SweepResult): string {
  const rows: [string, string][] = r.points.map((p) => [`interval ${secs(p.intervalSeconds)}`, `ETTR ${pct(p.meanEttr)} ± ${(100 * p.halfWidth).toFixed(2)}`]);
  rows.push(['optimum', `${secs(r.optimum.intervalSeconds)} (indistinguishable ${secs(r.indistinguishable.min)} .. ${secs(r.indistinguishable.max)})`]);
  rows.push(['Young / Daly', `${secs(r.youngIntervalSeconds)} / ${secs(r.dalyIntervalSeconds)}`]);
  return table(rows);
}

export function formatProfile(p: HardwareProfile): string {
  const c = p.calibration;
  const ar = c.allReduce;
  return table([
    ['host', `${p.host.hostname}, ${p.host.cpuModel}, ${c.cores} cores, Node ${p.host.node}`],
    ['CPU peak (one thread)', si(c.cpuPeakFlops, 'FLOP/s')],
    ['matmul (kernels.ts)', `${si(c.matmul.flopsPerSecond, 'FLOP/s')} at ${c.matmul.rows}x${c.matmul.inDim} -> ${c.matmul.outDim} (${pct(p.efficiency)} of peak)`],
    ['attention (layers.ts)', `${si(c.attention.flopsPerSecond, 'FLOP/s')} at T ${c.attention.T}, dim ${c.attention.dim}, ${c.attention.heads} heads`],
    ['memory copy', si(c.memoryBandwidth, 'B/s')],
    ['all-reduce', `${ar.ranks} ranks on ${ar.backend}, ${si(ar.rows[0]!.bytes, 'B')}..${si(ar.rows.at(-1)!.bytes, 'B')}, peak busbw ${si(Math.max(...ar.rows.map((r) => r.busBw)) * 1e9, 'B/s')}`],
    ['ring model', `α ${secs(ar.latencySeconds)} per hop, B ${si(ar.busBandwidth, 'B/s')}`],
    ['disk write+fsync', `${si(c.disk.bandwidth, 'B/s')} (${si(c.disk.bytes, 'B')} in ${c.disk.dir})`],
  ]);
}

export function formatPrediction(rows: readonly { label: string; p: Prediction }[]): string {
  const ms = (s: number) => `${(s * 1000).toPrecision(3)} ms`;
  return table(rows.map(({ label, p }) => [label,
    `step ${ms(p.stepSeconds)} = compute ${ms(p.computeSeconds)} + optimizer ${ms(p.optimizerSeconds)} + all-reduce ${ms(p.exposedAllReduceSeconds)} exposed; with a checkpoint ${ms(p.stepWithCheckpointSeconds)}`]));
}
