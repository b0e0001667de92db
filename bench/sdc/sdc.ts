/**
 * Silent-data-corruption benchmark: how often the SDC sentinel (src/metrics/sdc.ts)
 * detects, and names the right rank for, one random bit flip per run, per injection
 * site, against a NaN-only check (loss health's non-finite detector) in the same runs;
 * and what the sentinel costs per step. Prints a table and writes JSON.
 *
 *   node --import tsx bench/sdc/sdc.ts [--ranks 3] [--trials 50] [--steps 8] [--every 1] [--replay-every 1]
 *                                      [--seed 1] [--timed-steps 30] [--out bench/sdc/results.json]
 *
 * Each trial: a fresh DDP run of the tiny TinyLM (`steps` steps); one flip of a uniformly
 * drawn bit (0..31) of a uniformly drawn element on a uniformly drawn rank at a step
 * early enough for a check to follow. `effective`: the run's final parameters differ
 * from the clean run's on some rank (a flip absorbed by rounding is not). Rates are
 * over all trials and over the effective ones.
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { runRanks } from '../../test/helpers/ranks.js';

const { values: a } = parseArgs({
  options: {
    ranks: { type: 'string', default: '3' },
    trials: { type: 'string', default: '50' },
    steps: { type: 'string', default: '8' },
    every: { type: 'string', default: '1' },
    'replay-every': { type: 'string', default: '1' },
    seed: { type: 'string', default: '1' },
    'timed-steps': { type: 'string', default: '30' },
    'global-batch': { type: 'string', default: '6' },
    out: { type: 'string', default: 'bench/sdc/results.json' },
  },
});
const payload = {
  trials: Number(a.trials), steps: Number(a.steps), every: Number(a.every), replayEvery: Number(a['replay-every']),
  seed: Number(a.seed), timedSteps: Number(a['timed-steps']), globalBatch: Number(a['global-batch']),
};
type Counts = { trials: number; effective: number; sdcDetected: number; sdcNamed: number; sdcFalse: number; nanDetected: number; sdcDetectedEffective: number; nanDetectedEffective: number };
type R = { world: number; params: number; sites: Record<string, Counts>; cost: Record<'none' | 'checksum' | 'replay', number> };
const worker = fileURLToPath(new URL('./worker.ts', import.meta.url));
const [out] = await runRanks<R>(worker, Number(a.ranks), { payload, check: true, timeoutMs: 3_600_000 });
const r = out!.result!;

const pct = (n: number, d: number) => (d ? +((100 * n) / d).toFixed(1) : null);
const rows = Object.entries(r.sites).map(([site, c]) => ({
  site, trials: c.trials, effective: c.effective,
  'sdc %': pct(c.sdcDetected, c.trials), 'sdc named %': pct(c.sdcNamed, c.trials), 'sdc % of effective': pct(c.sdcDetectedEffective, c.effective),
  'nan-only %': pct(c.nanDetected, c.trials), 'nan-only % of effective': pct(c.nanDetectedEffective, c.effective), 'wrong rank named': c.sdcFalse,
}));
const c = r.cost;
const cost = {
  stepMs: +c.none.toFixed(2),
  checksumMs: +(c.checksum - c.none).toFixed(2), checksumPct: pct(c.checksum - c.none, c.none),
  replayMs: +(c.replay - c.none).toFixed(2), replayPct: pct(c.replay - c.none, c.none),
};
const report = { bench: 'sdc', date: new Date().toISOString(), ...payload, ranks: r.world, params: r.params, rows, cost };
console.table(rows);
console.log(`step ${cost.stepMs} ms (median, ${r.world} ranks, ${r.params} parameters); checksum every step +${cost.checksumMs} ms (${cost.checksumPct}%), replay every step +${cost.replayMs} ms (${cost.replayPct}%); every N steps: those over N`);
writeFileSync(a.out!, JSON.stringify(report, null, 2) + '\n');
console.log(`wrote ${a.out}`);
