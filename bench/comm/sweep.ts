/**
 * The CPU backend against raw Gloo, per collective and size: all-reduce, all-gather,
 * reduce-scatter (float32 sum) and all-to-all through the addon over TCP (NCCL_NODE_SHM=0;
 * with --shm through the shared-memory path, the default within a host), each call awaited, median per call on rank 0; bench/comm/sweep-worker.ts) and
 * every Gloo algorithm called from C++ without the addon (build/gloo_algos, same
 * sizes, element counts and iterations; it also times the addon's own TCP ring from
 * C++, reported as ownRingCppUs and never taken as the baseline). Addon and raw Gloo runs alternate, --rounds
 * times; per (collective, size) the table shows the median of the rounds' medians,
 * the spread (min-max over rounds), the best raw Gloo algorithm (lowest median),
 * the ratio addon/best and the verdict: `faster` (addon median at or below the
 * best median), `within spread` (slower by median, but the addon's fastest round
 * is no slower than the best algorithm's slowest: the ranges overlap), or `SLOWER`. Sizes: the all-reduce buffer, the gathered all-gather output, the
 * reduce-scatter and all-to-all input (per rank); a size below one float32 per rank moves one.
 * Broadcast, reduce, gather and scatter (root 0) are also timed as every rank sees them
 * (spanUs: n calls back to back from a barrier, the slowest rank's time over n, as
 * nccl-tests times a rank's loop of calls): rank 0's per-call time is its root's alone,
 * and a raw Gloo root returns once its sends are written, ahead of the ranks receiving.
 * A benchmark, not a test; table and JSON.
 *
 *   node --import tsx bench/comm/sweep.ts [--ranks 2,4] [--min 8] [--max 256M] [--step 4]
 *        [--iters 100] [--rounds 3] [--shm] [--json bench/comm/sweep.json] [--write-tuning path]
 *        [--new-ring-max 4M] [--alltoall-max 2M] [--rooted-max 64M] [--cpu-bind] [--colls broadcast,gather]
 *        [--large-iters 20]
 *
 * --write-tuning writes an NCCL_NODE_GLOO_TUNING file (docs/gloo.md): per
 * collective and rank count, the raw Gloo algorithm where it beat the addon beyond
 * the spread (its slowest round faster than the addon's fastest), else `auto`.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../test/helpers/ranks.js';
import { gang } from '../gang.js';
import { tuningFromSweep, type SweepRow } from './sweep-tuning.js';
import { median } from '../stats.js';
import { arg, bytesOf } from '../args.js';
import { exclusiveBinding } from '../../src/launch/cpu-bind.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const RANKS = arg('--ranks', '2,4').split(',').map(Number);
const MIN = bytesOf(arg('--min', '8'));
const MAX = bytesOf(arg('--max', '256M'));
const STEP = Number(arg('--step', '4'));
const ITERS = Number(arg('--iters', '100'));
const ROUNDS = Number(arg('--rounds', '3'));
// --large-iters: calls a size from 1 MiB on both sides (unset: iters/20, at least 5, then
// 3 from 16 MiB). A median of so few calls is one stall away from another verdict: a
// 2-rank 2 MiB broadcast over TCP went from 1.92x raw Gloo's at 5 calls to 0.76x at 20.
const LARGE_ITERS = process.argv.includes('--large-iters') ? Number(arg('--large-iters', '0')) : undefined;
if (LARGE_ITERS !== undefined && !(Number.isInteger(LARGE_ITERS) && LARGE_ITERS > 0)) {
  throw new Error(`--large-iters: expected a whole number of calls above 0, got ${arg('--large-iters', '')}`);
}
const SHM = process.argv.includes('--shm');
const JSON_OUT = arg('--json', join(ROOT, SHM ? 'bench/comm/sweep-shm.json' : 'bench/comm/sweep.json'));
const TUNING_OUT = arg('--write-tuning', '');
// --new-ring-max: time Gloo's new-style ring all-reduce only up to this size (on 4 ranks
// of a 2-core host it takes seconds a call from 512 KiB on); larger sizes compare
// against the other algorithms.
const NEW_RING_MAX = process.argv.includes('--new-ring-max') ? String(bytesOf(arg('--new-ring-max', '0'))) : undefined;
// --alltoall-max: time raw gloo::alltoall only up to this size (on 4 ranks of a 2-core
// host it took 325 ms a call at 2 MiB, 11 s at 64 MiB); larger all-to-all sizes get no
// row, and the reduce-scatter's baseline beyond it is legacy halving-doubling alone.
const ALLTOALL_MAX = process.argv.includes('--alltoall-max') ? String(bytesOf(arg('--alltoall-max', '0'))) : undefined;
// --rooted-max: time raw Gloo's broadcast, reduce, gather and scatter only up to this size
// (on 4 ranks of a 2-core host gloo::reduce moved about 2 MB/s at 128 MiB).
const ROOTED_MAX = process.argv.includes('--rooted-max') ? String(bytesOf(arg('--rooted-max', '0'))) : undefined;
// --cpu-bind: every rank of both sides under `taskset -c`, each on its own share of this
// process's CPUs as `nccl-node run --cpu-bind exclusive` would give it (src/launch/cpu-bind.ts).
const CPU_BIND = process.argv.includes('--cpu-bind');
const bindings = new Map<number, ReturnType<typeof exclusiveBinding>>();  // per rank count, worked out once
const bound = (ranks: number, rank: number, [file, args, env]: [string, string[], NodeJS.ProcessEnv]): [string, string[], NodeJS.ProcessEnv] => {
  if (!CPU_BIND) return [file, args, env];
  if (!bindings.has(ranks)) bindings.set(ranks, exclusiveBinding(ranks, process.env));
  const { taskset, cpus } = bindings.get(ranks)!;
  return [taskset, ['-c', cpus[rank]!, file, ...args], env];
};

// The sizes gloo_algos visits for (min, max, step): x step, the last one max.
const SIZES: number[] = [];
for (let b = MIN; b <= MAX; b = b < MAX && b * STEP > MAX ? MAX : b * STEP) SIZES.push(b);

const ALL_COLLS = ['allreduce', 'allgather', 'reducescatter', 'alltoall', 'broadcast', 'reduce', 'gather', 'scatter'];
// --colls: time only these (both sides), for a look at a few points without the whole sweep.
const COLLS = arg('--colls', ALL_COLLS.join(',')).split(',');
const unknown = COLLS.filter((c) => !ALL_COLLS.includes(c));
if (unknown.length > 0) throw new Error(`--colls: expected some of ${ALL_COLLS.join(',')}, got ${unknown.join(',')}`);
if (TUNING_OUT && COLLS.length < ALL_COLLS.length) throw new Error('--write-tuning needs every collective timed: drop --colls');

interface Point { coll: string; algo?: string; size: number; us: number; spanUs?: number }
const key = (coll: string, size: number): string => `${coll}/${size}`;

async function addonRound(ranks: number): Promise<Point[]> {
  const port = await freePort();
  const worker = fileURLToPath(new URL('./sweep-worker.ts', import.meta.url));
  return gang<Point>(ranks, (rank) => bound(ranks, rank, [process.execPath, ['--import', 'tsx', worker], {
    ...process.env, NCCL_NODE_SHM: SHM ? '1' : '0', RANK: String(rank), LOCAL_RANK: String(rank), WORLD_SIZE: String(ranks),
    MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port), NCCL_NODE_TOKEN: 'sweep',
    SWEEP_SIZES: SIZES.join(','), SWEEP_ITERS: String(ITERS), SWEEP_COLLS: COLLS.join(','),
    ...(LARGE_ITERS ? { SWEEP_LARGE_ITERS: String(LARGE_ITERS) } : {}),
  }]));
}

async function glooRound(bin: string, ranks: number): Promise<Point[]> {
  const dir = mkdtempSync(join(tmpdir(), 'sweep-gloo-'));
  try {
    return await gang<Point>(ranks, (rank) => bound(ranks, rank,
      [bin, [String(rank), String(ranks), dir, String(ITERS), String(MIN), String(MAX), String(STEP)],
      { ...process.env, GLOO_ALGOS_COLLS: COLLS.join(','), ...(NEW_RING_MAX ? { GLOO_ALGOS_NEW_RING_MAX: NEW_RING_MAX } : {}),
        ...(ALLTOALL_MAX ? { GLOO_ALGOS_ALLTOALL_MAX: ALLTOALL_MAX } : {}),
        ...(ROOTED_MAX ? { GLOO_ALGOS_ROOTED_MAX: ROOTED_MAX } : {}),
        ...(LARGE_ITERS ? { GLOO_ALGOS_LARGE_ITERS: String(LARGE_ITERS) } : {}) }]));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const r1 = (x: number): number => Number(x.toFixed(1));

/** `faster` (median at or below the baseline's), `within spread` (the ranges over rounds overlap) or `SLOWER`. */
function judge(ours: number[], theirs: number[]): string {
  if (median(ours) <= median(theirs)) return 'faster';
  return Math.min(...ours) <= Math.max(...theirs) ? 'within spread' : 'SLOWER';
}

async function sweep(bin: string, ranks: number): Promise<SweepRow[]> {
  const addon = new Map<string, number[]>();
  const raw = new Map<string, Map<string, number[]>>();
  // The rooted collectives' spans (Point.spanUs), per round: the addon's and raw Gloo's.
  const addonSpan = new Map<string, number[]>();
  const rawSpan = new Map<string, number[]>();
  const add = (m: Map<string, number[]>, k: string, v: number): void => void m.set(k, [...(m.get(k) ?? []), v]);
  for (let round = 0; round < ROUNDS; round++) {
    for (const p of await addonRound(ranks)) {
      add(addon, key(p.coll, p.size), p.us);
      if (p.spanUs !== undefined) add(addonSpan, key(p.coll, p.size), p.spanUs);
    }
    for (const p of await glooRound(bin, ranks)) {
      const algos = raw.get(key(p.coll, p.size)) ?? new Map<string, number[]>();
      algos.set(p.algo!, [...(algos.get(p.algo!) ?? []), p.us]);
      raw.set(key(p.coll, p.size), algos);
      if (p.spanUs !== undefined) add(rawSpan, key(p.coll, p.size), p.spanUs);
    }
    process.stderr.write(`sweep: ${ranks} ranks, round ${round + 1}/${ROUNDS} done\n`);
  }
  const rows: SweepRow[] = [];
  for (const coll of COLLS) {
    for (const size of SIZES) {
      const a = addon.get(key(coll, size))!;
      const timed = raw.get(key(coll, size));
      if (!timed) continue;  // not timed raw (--alltoall-max, --rooted-max)
      const all = [...timed.entries()].map(([algo, us]) => ({ algo, us, med: median(us) }));
      // gloo_algos also times the addon's own ring from C++ ("own-..."): shown apart, never the baseline.
      const algos = all.filter((x) => !x.algo.startsWith('own-'));
      const own = all.find((x) => x.algo.startsWith('own-'));
      const best = algos.reduce((x, y) => (y.med < x.med ? y : x));
      const am = median(a);
      const [amin, amax] = [Math.min(...a), Math.max(...a)];
      const [bmin, bmax] = [Math.min(...best.us), Math.max(...best.us)];
      const verdict = judge(a, best.us);
      const as = addonSpan.get(key(coll, size));
      const rs = rawSpan.get(key(coll, size));
      const span = as && rs ? {
        addonUs: r1(median(as)), addonMin: r1(Math.min(...as)), addonMax: r1(Math.max(...as)),
        rawUs: r1(median(rs)), rawMin: r1(Math.min(...rs)), rawMax: r1(Math.max(...rs)),
        ratio: Number((median(as) / median(rs)).toFixed(2)), verdict: judge(as, rs),
      } : undefined;
      rows.push({
        ranks, coll, size, addonUs: r1(am), addonMin: r1(amin), addonMax: r1(amax),
        bestAlgo: best.algo, bestUs: r1(best.med), bestMin: r1(bmin), bestMax: r1(bmax),
        ratio: Number((am / best.med).toFixed(2)), verdict,
        rounds: { addonUs: a.map(r1), bestUs: best.us.map(r1) },
        ownCppUs: own ? r1(own.med) : undefined,
        raw: Object.fromEntries(all.map((x) => [x.algo, { us: r1(x.med), min: r1(Math.min(...x.us)), max: r1(Math.max(...x.us)) }])),
        span,
      });
    }
  }
  return rows;
}

const human = (b: number): string => (b >= 1 << 20 ? `${b / 2 ** 20}M` : b >= 1024 ? `${b / 1024}K` : `${b}`);

async function main(): Promise<void> {
  const bin = [process.env.GLOO_ALGOS, join(ROOT, 'build/gloo_algos')].find((p) => p && existsSync(p));
  if (!bin) throw new Error('build/gloo_algos is missing: build with scripts/setup.sh (NCCL_NODE_DEV)');
  const rows: SweepRow[] = [];
  for (const ranks of RANKS) {
    const these = await sweep(bin, ranks);
    rows.push(...these);
    for (const coll of COLLS) {
      console.log(`# ${coll}, ${ranks} ranks, float32 sum: median µs per awaited call over ${ROUNDS} rounds (min-max)`);
      console.table(these.filter((r) => r.coll === coll).map((r) => ({
        size: human(r.size), addonUs: r.addonUs, addonSpread: `${r.addonMin}-${r.addonMax}`,
        bestRawUs: r.bestUs, bestSpread: `${r.bestMin}-${r.bestMax}`, bestAlgo: r.bestAlgo, ratio: r.ratio, verdict: r.verdict,
        ownRingCppUs: r.ownCppUs,
        ...(r.span ? { spanUs: r.span.addonUs, rawSpanUs: r.span.rawUs, spanRatio: r.span.ratio, spanVerdict: r.span.verdict } : {}),
      })));
    }
  }
  const doc = {
    bench: 'comm-sweep', path: SHM ? 'shm' : 'tcp', cpuBind: CPU_BIND, dtype: 'float32', op: 'sum', rounds: ROUNDS, iters: ITERS, largeIters: LARGE_ITERS ?? null, step: STEP,
    tuning: process.env.NCCL_NODE_GLOO_TUNING ?? null, newRingMax: NEW_RING_MAX ? Number(NEW_RING_MAX) : null,
    alltoallMax: ALLTOALL_MAX ? Number(ALLTOALL_MAX) : null, rootedMax: ROOTED_MAX ? Number(ROOTED_MAX) : null,
    colls: COLLS, node: process.version, rows,
  };
  writeFileSync(JSON_OUT, `${JSON.stringify(doc, null, 1)}\n`);
  console.log(`wrote ${JSON_OUT}`);
  if (TUNING_OUT) {
    writeFileSync(TUNING_OUT, `${JSON.stringify(tuningFromSweep(rows), null, 1)}\n`);
    console.log(`wrote ${TUNING_OUT}`);
  }
}

await main();
