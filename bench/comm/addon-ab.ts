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
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../test/helpers/ranks.js';
import { gang } from '../gang.js';
import { mean, median } from '../stats.js';

const arg = (name: string, def: string): string => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1]! : def;
};
const ROUNDS = Number(arg('--rounds', '8'));
const CALLS = Number(arg('--calls', '100000'));
const self = fileURLToPath(import.meta.url);

interface Point { meanUs: number; p50Us: number }

/** One process of a case (this file with BENCH_ROLE set): prints rank 0's point as JSON. */
async function role(which: string): Promise<void> {
  const us = new Float64Array(CALLS);
  if (which === 'native1') {
    const { DTYPE_CODE, REDUCE_OP_CODE } = await import('../../src/dtypes.js');
    const { binding, OpKind } = await import('../../src/native.js');
    const { StoreServer } = await import('../../src/rendezvous/server.js');
    const server = await StoreServer.start({ host: '127.0.0.1', port: 0, token: 'addon-ab' });
    const comm = await binding().createGloo({ rank: 0, size: 1, storeHost: '127.0.0.1', storePort: server.port, token: 'addon-ab',
      prefix: 'addon-ab/', hostname: '127.0.0.1', timeoutMs: 30_000, checkAgreement: true });
    const buf = new Float32Array(1);
    const call = () => comm.submit(OpKind.allReduce, DTYPE_CODE.float32, REDUCE_OP_CODE.sum, buf, buf, 1, -1, 30_000);
    for (let i = 0; i < 20_000; i++) await call();
    for (let i = 0; i < CALLS; i++) {
      const t0 = performance.now();
      await call();
      us[i] = (performance.now() - t0) * 1000;
    }
    await comm.destroy();
    await server.close();
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

async function runCase(which: 'native1' | 'shm2', addon: string): Promise<Point> {
  const env = { ...process.env, BENCH_ROLE: which, NCCL_NODE_ADDON: addon };
  if (which === 'native1') {
    return new Promise((done, fail) => {
      const p = spawn(process.execPath, ['--import', 'tsx', self, ...process.argv.slice(2)], { env, stdio: ['ignore', 'pipe', 'inherit'] });
      let out = '';
      p.stdout.on('data', (d) => (out += d));
      p.on('exit', (code) => (code === 0 ? done(JSON.parse(out) as Point) : fail(new Error(`native1 exited with ${code}`))));
    });
  }
  const port = await freePort();
  const [p] = await gang<Point>(2, (rank) => [process.execPath, ['--import', 'tsx', self, ...process.argv.slice(2)], {
    ...env, NCCL_NODE_SHM: '1', RANK: String(rank), LOCAL_RANK: String(rank), WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1',
    MASTER_PORT: String(port), NCCL_NODE_TOKEN: 'addon-ab',
  }]);
  return p!;
}

async function main(): Promise<void> {
  const builds = { base: resolve(arg('--base', '')), new: resolve(arg('--new', '')) };
  if (!arg('--base', '') || !arg('--new', '')) throw new Error('--base <addon.node> and --new <addon.node> are required');
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
  const json = arg('--json', '');
  if (json) writeFileSync(json, `${JSON.stringify({ bench: 'addon-ab', node: process.version, rounds: ROUNDS, calls: CALLS, builds, rows, perRound: runs }, null, 1)}\n`);
}

if (process.env.BENCH_ROLE) await role(process.env.BENCH_ROLE);
else await main();
