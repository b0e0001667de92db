/**
 * Overlap benchmark (DDP bucketing): prints a table and writes JSON.
 *
 *   node --import tsx bench/runtime/overlap.ts [--ranks 2] [--rows 2] [--steps 3] [--out bench/runtime/overlap.json]
 *
 * exposed % = time finish() still waits after the last rank's backward ended,
 * over the same all-reduce run alone (rank skew is reported, not counted). Goal: <= 15 % when backward compute >= communication time.
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { runRanks } from '../../test/helpers/ranks.js';

const { values: a } = parseArgs({
  options: {
    ranks: { type: 'string', default: '2' },
    rows: { type: 'string', default: '2' },
    steps: { type: 'string', default: '3' },
    warmup: { type: 'string', default: '1' },
    out: { type: 'string', default: 'bench/runtime/overlap.json' },
  },
});
const worker = fileURLToPath(new URL('./overlap-worker.ts', import.meta.url));
type R = { rank: number; results: Record<string, { computeMs: number; exposedMs: number; skewMs: number; stepMs: number; buckets: number }>; commAloneMs: number; params: number };
const out = await runRanks<R>(worker, Number(a.ranks), { payload: { rowsPerRank: Number(a.rows), steps: Number(a.steps), warmup: Number(a.warmup) }, check: true, timeoutMs: 590_000 });

// Average over ranks: each rank's exposed time differs by its compute speed.
const ranks = out.map((o) => o.result!);
const mean = (f: (r: R) => number) => ranks.reduce((s, r) => s + f(r), 0) / ranks.length;
const commMs = mean((r) => r.commAloneMs);
const rows = Object.keys(ranks[0]!.results).map((mode) => {
  const m = (k: 'computeMs' | 'exposedMs' | 'skewMs' | 'stepMs') => mean((r) => r.results[mode]![k]);
  return {
    mode,
    buckets: ranks[0]!.results[mode]!.buckets,
    stepMs: +m('stepMs').toFixed(1),
    fwdBwdMs: +m('computeMs').toFixed(1),
    rankSkewMs: +m('skewMs').toFixed(1),
    exposedCommMs: +m('exposedMs').toFixed(1),
    exposedPct: mode === 'compute' ? null : +((100 * m('exposedMs')) / commMs).toFixed(1),
  };
});
const report = {
  bench: 'runtime-overlap',
  date: new Date().toISOString(),
  ranks: Number(a.ranks),
  rowsPerRank: Number(a.rows),
  params: ranks[0]!.params,
  gradientMiB: +((ranks[0]!.params * 4) / 2 ** 20).toFixed(2),
  commAloneMs: +commMs.toFixed(1),
  rows,
};
console.table(rows);
console.log(`${report.params} parameters (${report.gradientMiB} MiB of gradients), ${report.ranks} ranks, all-reduce alone ${report.commAloneMs} ms`);
writeFileSync(a.out!, JSON.stringify(report, null, 2) + '\n');
console.log(`wrote ${a.out}`);
