/**
 * Two builds of the addon against each other (NCCL_NODE_ADDON), the runs alternating
 * round by round so that the host's fast and slow phases (bench/README.md) fall on both:
 *
 *   native1  1 rank, a 4-byte float32 all-reduce through the native communicator's
 *            submit(), awaited (no TypeScript layer): the native call path alone;
 *   shm2     2 ranks of this host, an 8-byte all-reduce through the Communicator,
 *            awaited, over shared memory: mean and median per call on rank 0.
 *
 * Per round and case the new build's figure as a ratio to the base build's in the same
 * round; reported: medians over rounds and the ratios' median and range. A benchmark,
 * not a test; table and JSON.
 *
 *   node --import tsx bench/comm/addon-ab.ts --base old.node --new build/Release/nccl_node.node
 *        [--rounds 8] [--calls 100000] [--json out.json]
 */
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { freePort } from '../../test/helpers/ranks.js';
import { gang } from '../gang.js';
import { mean, median } from '../stats.js';
import { nativeAllReduce, oneRankStore } from './one-rank-native.js';

const { values: a } = parseArgs({
  options: {
    base: { type: 'string' },
    new: { type: 'string' },
    rounds: { type: 'string', default: '8' },
    calls: { type: 'string', default: '100000' },
    json: { type: 'string' },
  },
});
const ROUNDS = Number(a.rounds);
const CALLS = Number(a.calls);
const self = fileURLToPath(import.meta.url);

interface Point { meanUs: number; p50Us: number }

/** One process of a case (this file with BENCH_ROLE set): prints rank 0's point as JSON. */
async function role(which: string): Promise<void> {
  const us = new Float64Array(CALLS);
  if (which === 'native1') {
    const store = await oneRankStore('addon-ab');
    const comm = await store.open('addon-ab/');
    const buf = new Float32Array(1);
    for (let i = 0; i < 20_000; i++) await nativeAllReduce(comm, buf);
    for (let i = 0; i < CALLS; i++) {
      const t0 = performance.now();
      await nativeAllReduce(comm, buf);
      us[i] = (performance.now() - t0) * 1000;
    }
    await comm.destroy();
    await store.close();
  } else {
    const { init } = await import('../../src/index.js');
    const comm = await init({ backend: 'gloo' });
    const buf = new Float32Array(2).fill(1);
    for (let i = 0; i < 5000; i++) await comm.allReduce(buf);
    await comm.barrier();
    for (let i = 0; i < CALLS; i++) {
      const t0 = performance.now();
      await comm.allReduce(buf);
      us[i] = (performance.now() - t0) * 1000;
    }
    const rank = comm.rank;
    await comm.destroy();
    if (rank !== 0) return;
  }
  process.stdout.write(`${JSON.stringify({ meanUs: mean(us), p50Us: median(us) })}\n`);
}

/** One run of a case with one build: native1 is a gang of one process, shm2 of two. */
async function runCase(which: 'native1' | 'shm2', addon: string): Promise<Point> {
  const ranks = which === 'native1' ? 1 : 2;
  const port = await freePort();
  const [p] = await gang<Point>(ranks, (rank) => [process.execPath, ['--import', 'tsx', self, ...process.argv.slice(2)], {
    ...process.env, BENCH_ROLE: which, NCCL_NODE_ADDON: addon, NCCL_NODE_SHM: '1', RANK: String(rank), LOCAL_RANK: String(rank),
    WORLD_SIZE: String(ranks), MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port), NCCL_NODE_TOKEN: 'addon-ab',
  }]);
  return p!;
}

async function main(): Promise<void> {
  if (!a.base || !a.new) throw new Error('--base <addon.node> and --new <addon.node> are required');
  const builds = { base: resolve(a.base), new: resolve(a.new) };
  const cases = ['native1', 'shm2'] as const;
  const runs: Record<string, Record<'base' | 'new', Point[]>> = Object.fromEntries(cases.map((c) => [c, { base: [], new: [] }]));
  for (let r = 0; r < ROUNDS; r++) {
    for (const c of cases) for (const b of ['base', 'new'] as const) runs[c]![b].push(await runCase(c, builds[b]));
    process.stderr.write(`addon-ab: round ${r + 1}/${ROUNDS} done\n`);
  }
  const r2 = (x: number) => Number(x.toFixed(2));
  const rows = cases.flatMap((c) => (['meanUs', 'p50Us'] as const).map((f) => {
    const base = runs[c]!.base.map((p) => p[f]);
    const next = runs[c]!.new.map((p) => p[f]);
    const ratios = next.map((x, i) => x / base[i]!);
    return { case: c, figure: f, baseUs: r2(median(base)), newUs: r2(median(next)), ratio: r2(median(ratios)),
      ratioMin: r2(Math.min(...ratios)), ratioMax: r2(Math.max(...ratios)) };
  }));
  console.log(`# base ${builds.base}\n# new  ${builds.new}\n# ${ROUNDS} alternating rounds, ${CALLS} awaited calls per run; new / base per round`);
  console.log('| case | figure | base µs | new µs | new / base (min-max) |\n|---|---|---|---|---|');
  for (const x of rows) console.log(`| ${x.case} | ${x.figure} | ${x.baseUs} | ${x.newUs} | ${x.ratio} (${x.ratioMin}-${x.ratioMax}) |`);
  if (a.json) writeFileSync(a.json, `${JSON.stringify({ bench: 'addon-ab', node: process.version, rounds: ROUNDS, calls: CALLS, builds, rows, perRound: runs }, null, 1)}\n`);
}

if (process.env.BENCH_ROLE) await role(process.env.BENCH_ROLE);
else await main();
