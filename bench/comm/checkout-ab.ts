/**
 * This checkout against another, whole (TypeScript layer and addon each), on 1 or more
 * ranks of this host: every rank process loads both checkouts and holds a world
 * communicator of each (two stores, two shared-memory segments), and the two take turns
 * in blocks of calls, in the same order on every rank, so the host's fast and slow phases
 * (bench/README.md) fall on both alike. Per block the time per call of a back-to-back
 * loop of 8-byte float32 sums: blocking `allReduceSync` (sync) or awaited `allReduce`
 * (awaited); or of awaited float32 sum `allReduce`s of --bytes (allreduce), `allToAll`s
 * of --bytes per rank (alltoall), or
 * `allGather`s and `reduceScatter`s (sum) of --bytes a rank's block (allgather,
 * reducescatter), or `broadcast`, `reduce` (sum), `gather` and `scatter` of --bytes per
 * rank (a gather's input, a scatter's output; the root rotates over the ranks call by
 * call, or stays at --root, where a root's peers may run ahead of it); on rank 0;
 * per case the median over blocks, and this checkout's blocks as ratios to the other's
 * block of the same round. --bytes takes a list: one case per size. A benchmark, not a
 * test; table and JSON.
 * The other checkout needs its own build (`git worktree add ../base <commit>`, node_modules
 * linked from this one, `npx cmake-js compile --out build` there). With --against-env
 * NAME=VALUE the other side is this checkout itself, its communicator made with that
 * environment variable set (a knob against its default, in the same processes).
 * --both-orders runs every case twice, the other side's communicator made first and then
 * this one's first (a row each, `order`): two communicators of one process need not run
 * alike (2 ranks over TCP, the second one made took 1.5x the first's time for the same
 * all-gather), and the two orders show that apart from the difference under test.
 *
 *   node --import tsx bench/comm/checkout-ab.ts (--against ../base | --against-env NAME=VALUE) [--ranks 1,2]
 *        [--modes sync,awaited,allreduce,alltoall,allgather,reducescatter,broadcast,reduce,gather,scatter]
 *        [--bytes 64,65536]
 *        [--blocks 40] [--calls 20000] [--both-orders] [--root 0] [--json out.json]
 */
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { freePort } from '../../test/helpers/ranks.js';
import { gang } from '../gang.js';
import { median } from '../stats.js';

interface Side {
  rank: number;
  size: number;
  allReduce(buf: Float32Array): PromiseLike<unknown>;
  allReduceSync(buf: Float32Array): Float32Array;
  allToAll(input: Float32Array, output: Float32Array): PromiseLike<unknown>;
  allGather(input: Float32Array, output: Float32Array): PromiseLike<unknown>;
  reduceScatter(input: Float32Array, output: Float32Array): PromiseLike<unknown>;
  broadcast(buf: Float32Array, o: { root: number }): PromiseLike<unknown>;
  reduce(buf: Float32Array, o: { root: number; out?: Float32Array }): PromiseLike<unknown>;
  gather(input: Float32Array, output: Float32Array | null, o: { root: number }): PromiseLike<unknown>;
  scatter(input: Float32Array | null, output: Float32Array, o: { root: number }): PromiseLike<unknown>;
  destroy(): Promise<void>;
}
interface Row { ranks: number; mode: string; bytes: number | null; order: 'against first' | 'this first'; thisUs: number; againstUs: number; ratio: number; ratioRange: string; bestThisUs: number; bestAgainstUs: number }

const THIS = fileURLToPath(new URL('../..', import.meta.url));

if (process.env.CHECKOUT_AB_ROLE === 'rank') {
  const calls = Number(process.env.CHECKOUT_AB_CALLS);
  const blocks = Number(process.env.CHECKOUT_AB_BLOCKS);
  const mode = process.env.CHECKOUT_AB_MODE!;
  const open = async (root: string, port: string): Promise<Side> => {
    process.env.MASTER_PORT = port;
    const m = (await import(pathToFileURL(resolve(root, 'src/index.ts')).href)) as { init(o: object): Promise<Side> };
    return m.init({ backend: 'gloo' });
  };
  // Each side resolves its own addon from its own root; the other side's communicator is
  // made first unless this case runs this one's first (--both-orders). With --against-env
  // the other side is this checkout, the variable set while its communicator is made.
  const [name, ...value] = (process.env.CHECKOUT_AB_AGAINST_ENV ?? '').split('=');
  const openAgainst = async (): Promise<Side> => {
    if (name) process.env[name] = value.join('=');
    const side = await open(process.env.CHECKOUT_AB_AGAINST!, process.env.CHECKOUT_AB_PORT_AGAINST!);
    if (name) delete process.env[name];
    return side;
  };
  const thisFirst = process.env.CHECKOUT_AB_THIS_FIRST === '1';
  const early = thisFirst ? await open(THIS, process.env.CHECKOUT_AB_PORT_THIS!) : await openAgainst();
  const against = thisFirst ? await openAgainst() : early;
  const mine = thisFirst ? early : await open(THIS, process.env.CHECKOUT_AB_PORT_THIS!);
  const buf = new Float32Array(2).fill(1);
  const elements = Number(process.env.CHECKOUT_AB_BYTES) / 4;
  const [input, output] = [new Float32Array(elements).fill(1), new Float32Array(elements).fill(0)];
  // size x elements: a gather's or an all-gather's output, a scatter's or a reduce-scatter's input.
  const [wide, reduced] = [new Float32Array(elements * mine.size).fill(1), new Float32Array(elements)];
  const zeros = new Float32Array(elements); // summed in place: stays 0, never overflows
  const n = mode === 'sync' ? calls : Math.max(1, Math.floor(calls / 4));
  // --root: the rooted modes' root, or -1 (the default): rotating call by call.
  const fixedRoot = Number(process.env.CHECKOUT_AB_ROOT ?? '-1');
  const block = async (c: Side): Promise<number> => {
    const t0 = performance.now();
    const me = c.rank;
    const rootOf = (i: number): number => (fixedRoot >= 0 ? fixedRoot : i % c.size);
    if (mode === 'sync') for (let i = 0; i < n; i++) c.allReduceSync(buf);
    else if (mode === 'allreduce') for (let i = 0; i < n; i++) await c.allReduce(zeros);
    else if (mode === 'alltoall') for (let i = 0; i < n; i++) await c.allToAll(input, output);
    else if (mode === 'allgather') for (let i = 0; i < n; i++) await c.allGather(input, wide);
    else if (mode === 'reducescatter') for (let i = 0; i < n; i++) await c.reduceScatter(wide, output);
    else if (mode === 'broadcast') for (let i = 0; i < n; i++) await c.broadcast(input, { root: rootOf(i) });
    else if (mode === 'reduce') for (let i = 0; i < n; i++) await c.reduce(input, { root: rootOf(i), out: reduced });
    else if (mode === 'gather') for (let i = 0; i < n; i++) await c.gather(input, rootOf(i) === me ? wide : null, { root: rootOf(i) });
    else if (mode === 'scatter') for (let i = 0; i < n; i++) await c.scatter(rootOf(i) === me ? wide : null, output, { root: rootOf(i) });
    else for (let i = 0; i < n; i++) await c.allReduce(buf);
    return ((performance.now() - t0) * 1000) / n;
  };
  for (let i = 0; i < 3; i++) { await block(against); await block(mine); } // the JIT
  const t = { this: [] as number[], against: [] as number[] };
  for (let b = 0; b < blocks; b++) {
    // Alternating which goes first, the same on every rank.
    if (b % 2 === 0) { t.against.push(await block(against)); t.this.push(await block(mine)); }
    else { t.this.push(await block(mine)); t.against.push(await block(against)); }
  }
  if (mine.rank === 0) process.stdout.write(`${JSON.stringify(t)}\n`);
  await mine.destroy();
  await against.destroy();
} else {
  const { values: a } = parseArgs({
    options: {
      against: { type: 'string' },
      'against-env': { type: 'string' },
      ranks: { type: 'string', default: '1,2' },
      modes: { type: 'string', default: 'sync,awaited' },
      blocks: { type: 'string', default: '40' },
      calls: { type: 'string', default: '20000' },
      bytes: { type: 'string', default: '65536' },
      json: { type: 'string' },
      'both-orders': { type: 'boolean', default: false },
      root: { type: 'string', default: '-1' },
    },
  });
  const againstEnv = a['against-env'];
  if (againstEnv !== undefined && !/^[A-Z_][A-Z0-9_]*=/.test(againstEnv)) throw new Error(`--against-env: expected NAME=VALUE, got ${againstEnv}`);
  if (againstEnv !== undefined) a.against ??= THIS;
  if (!a.against) throw new Error('--against <path of another checkout, built> or --against-env NAME=VALUE is required');
  const rows: Row[] = [];
  const SIZED = new Set(['allreduce', 'alltoall', 'allgather', 'reducescatter', 'broadcast', 'reduce', 'gather', 'scatter']);
  for (const ranks of a.ranks!.split(',').map(Number)) {
    for (const mode of a.modes!.split(',')) for (const bytes of SIZED.has(mode) ? a.bytes!.split(',') : ['8']) for (const thisFirst of a['both-orders'] ? [false, true] : [false]) {
      const [pThis, pAgainst] = [await freePort(), await freePort()];
      const [t] = await gang<{ this: number[]; against: number[] }>(ranks, (rank) => [process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url)], {
        ...process.env, CHECKOUT_AB_ROLE: 'rank', CHECKOUT_AB_MODE: mode, CHECKOUT_AB_CALLS: a.calls!, CHECKOUT_AB_BLOCKS: a.blocks!, CHECKOUT_AB_BYTES: bytes, CHECKOUT_AB_ROOT: a.root!,
        CHECKOUT_AB_AGAINST: resolve(a.against!), CHECKOUT_AB_AGAINST_ENV: againstEnv ?? '', CHECKOUT_AB_THIS_FIRST: thisFirst ? '1' : '0', CHECKOUT_AB_PORT_THIS: String(pThis), CHECKOUT_AB_PORT_AGAINST: String(pAgainst),
        RANK: String(rank), LOCAL_RANK: String(rank), WORLD_SIZE: String(ranks), MASTER_ADDR: '127.0.0.1', NCCL_NODE_TOKEN: 'checkout-ab',
      }]);
      const ratios = t!.this.map((x, i) => x / t!.against[i]!);
      const r3 = (x: number): number => Number(x.toFixed(3));
      rows.push({
        ranks, mode, bytes: SIZED.has(mode) ? Number(bytes) : null, order: thisFirst ? 'this first' : 'against first', thisUs: r3(median(t!.this)), againstUs: r3(median(t!.against)), ratio: r3(median(ratios)),
        ratioRange: `${r3(Math.min(...ratios))}-${r3(Math.max(...ratios))}`, bestThisUs: r3(Math.min(...t!.this)), bestAgainstUs: r3(Math.min(...t!.against)),
      });
    }
  }
  const other = againstEnv ? `itself with ${againstEnv}` : resolve(a.against!);
  console.log(`# 8-byte float32 sum (sized modes: the bytes a rank), this checkout (${THIS}) against ${other}: µs per call on rank 0, median over ${a.blocks} blocks`);
  console.table(rows);
  if (a.json) writeFileSync(a.json, `${JSON.stringify({ bench: 'checkout-ab', against: a.against, againstEnv, blocks: Number(a.blocks), calls: Number(a.calls), node: process.version, rows }, null, 1)}\n`);
}
