/**
 * Small all-reduces between the ranks of one host through shared memory, back to
 * back, each awaited, under several bounds of the calling thread's poll
 * (NCCL_NODE_SHM_CALLER_SPIN_US; 0: every call finished by the worker thread): the
 * whole distribution per call, not only its median, because a call whose poll gives
 * up costs tens to hundreds of microseconds (the hand-off to the worker and back)
 * where one completed on the caller costs a few. The bounds alternate --rounds
 * times in one run; a figure is the median of the rounds' figures, the mean's spread
 * (min-max) beside it, and each mean as a ratio to the --baseline bound's.
 * A benchmark, not a test; table and JSON.
 *
 *   node --import tsx bench/shm/caller-spin.ts [--ranks 2] [--calls 100000]
 *        [--sizes 8,4K,32K] [--spins 0,50,1000] [--baseline 50] [--rounds 3] [--json out.json]
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { freePort } from '../../test/helpers/ranks.js';
import { gang } from '../gang.js';
import { mean, median, quantile } from '../stats.js';

const { values: a } = parseArgs({
  options: {
    ranks: { type: 'string', default: '2' },
    calls: { type: 'string', default: '100000' },
    sizes: { type: 'string', default: '8,4K,32K' },
    spins: { type: 'string', default: '0,50,1000' },
    baseline: { type: 'string', default: '50' },
    rounds: { type: 'string', default: '3' },
    json: { type: 'string' },
  },
});
const bytesOf = (s: string): number => Number.parseFloat(s) * ({ K: 1024, M: 1024 ** 2 }[s.slice(-1)] ?? 1);
const RANKS = Number(a.ranks);
const CALLS = Number(a.calls);
const SIZES = a.sizes.split(',').map(bytesOf);
const SPINS = a.spins.split(',').map(Number);
const BASELINE = Number(a.baseline);
const ROUNDS = Number(a.rounds);

interface Point { size: number; meanUs: number; p50: number; p90: number; p99: number; p999: number; onCaller: number }

/** One rank (this file, started with BENCH_ROLE=rank): rank 0 prints a point per size. */
async function rankMain(): Promise<void> {
  const { init } = await import('../../src/index.js');
  const { binding } = await import('../../src/native.js');
  const comm = await init({ backend: 'gloo' });
  for (const size of SIZES) {
    const buf = new Float32Array(size / 4).fill(1);
    for (let i = 0; i < 5000; i++) await comm.allReduce(buf); // the JIT, the segment's pages
    await comm.barrier();
    const before = binding().glooShmStats().onCaller;
    const us = new Float64Array(CALLS);
    for (let i = 0; i < CALLS; i++) {
      const t0 = performance.now();
      await comm.allReduce(buf);
      us[i] = (performance.now() - t0) * 1000;
    }
    const onCaller = (binding().glooShmStats().onCaller - before) / CALLS;
    const r = (x: number): number => Number(x.toFixed(2));
    const p: Point = { size, meanUs: r(mean(us)), p50: r(median(us)), p90: r(quantile(us, 0.9)), p99: r(quantile(us, 0.99)),
      p999: r(quantile(us, 0.999)), onCaller: Number(onCaller.toFixed(5)) };
    if (comm.rank === 0) process.stdout.write(`${JSON.stringify(p)}\n`);
    await comm.barrier();
  }
  await comm.destroy();
}

async function run(spin: number): Promise<Point[]> {
  const port = await freePort();
  const self = fileURLToPath(import.meta.url);
  return gang<Point>(RANKS, (rank) => [process.execPath, ['--import', 'tsx', self, ...process.argv.slice(2)], {
    ...process.env, BENCH_ROLE: 'rank', NCCL_NODE_SHM: '1', NCCL_NODE_SHM_CALLER_SPIN_US: String(spin),
    RANK: String(rank), LOCAL_RANK: String(rank), WORLD_SIZE: String(RANKS), MASTER_ADDR: '127.0.0.1',
    MASTER_PORT: String(port), NCCL_NODE_TOKEN: 'caller-spin',
  }]);
}

async function main(): Promise<void> {
  if (!SPINS.includes(BASELINE)) throw new Error(`--baseline ${BASELINE} is not one of --spins ${SPINS.join(',')}`);
  const runs = new Map<string, Point[]>(); // `${spin}/${size}` -> one point per round
  for (let round = 0; round < ROUNDS; round++) {
    for (const spin of SPINS) {
      for (const p of await run(spin)) {
        const key = `${spin}/${p.size}`;
        runs.set(key, [...(runs.get(key) ?? []), p]);
      }
    }
  }
  const rows = SIZES.flatMap((size) => SPINS.map((spin) => {
    const ps = runs.get(`${spin}/${size}`)!;
    const pick = (f: (p: Point) => number, digits = 2): number => Number(median(ps.map(f)).toFixed(digits));
    const means = ps.map((p) => p.meanUs);
    return { size, spinUs: spin, meanUs: pick((p) => p.meanUs), meanMin: Math.min(...means), meanMax: Math.max(...means),
      p50: pick((p) => p.p50), p90: pick((p) => p.p90), p99: pick((p) => p.p99), p999: pick((p) => p.p999),
      onCaller: pick((p) => p.onCaller, 4), perRound: ps };
  }));
  for (const row of rows) {
    const base = rows.find((r) => r.size === row.size && r.spinUs === BASELINE)!;
    Object.assign(row, { meanVsBaseline: Number((row.meanUs / base.meanUs).toFixed(2)) });
  }
  console.log(`# ${RANKS} ranks, float32 sum through shared memory, ${CALLS} awaited calls per run, ${ROUNDS} rounds; µs per call on rank 0`);
  console.log(`# spin: NCCL_NODE_SHM_CALLER_SPIN_US (0: every call through the worker thread); mean / baseline: against spin ${BASELINE}`);
  const cols = ['size', 'spin', 'mean', 'min-max', 'p50', 'p90', 'p99', 'p99.9', 'on caller', 'mean/base'];
  console.log(`| ${cols.join(' | ')} |\n|${cols.map(() => '---').join('|')}|`);
  for (const r of rows as (typeof rows[number] & { meanVsBaseline: number })[]) {
    console.log(`| ${r.size} | ${r.spinUs} | ${r.meanUs} | ${r.meanMin}-${r.meanMax} | ${r.p50} | ${r.p90} | ${r.p99} | ${r.p999} | ${r.onCaller} | ${r.meanVsBaseline} |`);
  }
  if (a.json) {
    writeFileSync(a.json, `${JSON.stringify({ bench: 'shm-caller-spin', node: process.version, ranks: RANKS, calls: CALLS, rounds: ROUNDS, baselineSpinUs: BASELINE, rows }, null, 1)}\n`);
  }
}

if (process.env.BENCH_ROLE === 'rank') await rankMain();
else await main();
