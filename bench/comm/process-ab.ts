/**
 * This checkout against another, each in gangs of processes of its own: one gang of
 * --ranks processes loads one checkout, times --blocks blocks of --calls awaited calls of
 * --mode and exits; the checkouts alternate gang by gang, --runs times each, starting
 * with the other one. Where checkout-ab.ts holds both checkouts' communicators in the same
 * processes, here neither shares a process, a thread or a socket with the other, so
 * what one leaves behind (a socket's state, a thread's placement) cannot reach the other:
 * the way to compare builds on an effect that settles per process (a 2-rank broadcast of
 * 512 KiB over TCP ran at either 55-65 or 130-200 µs a call for a whole process).
 * Per run, rank 0's median µs per call over its blocks' medians; per checkout, the median
 * and range over runs, and their ratio; and the mean over every block of every run (a
 * process can switch between a fast and a slow mode from block to block, which the median
 * of a few runs hides). With --against-env NAME=VALUE the other side is
 * this checkout with that variable set (a switch such as NCCL_NODE_TCP_RCVLOWAT=0, which
 * also settles per process). A benchmark, not a test; table and JSON.
 *
 *   NCCL_NODE_SHM=0 node --import tsx bench/comm/process-ab.ts (--against ../base | --against-env NAME=VALUE) [--ranks 2]
 *        [--mode broadcast|allgather|allreduce|gather|scatter] [--bytes 524288] [--runs 4]
 *        [--blocks 6] [--calls 1000] [--json out.json]
 *
 * --bytes: a broadcast's buffer (root 0), an all-reduce's, an all-gather's output, a
 * gather's output on the root, a scatter's input on the root (root 0); float32.
 */
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { freePort } from '../../test/helpers/ranks.js';
import { sidesOf } from '../args.js';
import { gang } from '../gang.js';
import { mean, median, sig3 as us } from '../stats.js';
import { timeBackToBack } from '../timing.js';

interface Comm {
  rank: number;
  size: number;
  barrier(): PromiseLike<unknown>;
  broadcast(b: Float32Array, o: object): PromiseLike<unknown>;
  allReduce(b: Float32Array): PromiseLike<unknown>;
  allGather(i: Float32Array, o: Float32Array): PromiseLike<unknown>;
  gather(i: Float32Array, o: Float32Array | null, opts: object): PromiseLike<unknown>;
  scatter(i: Float32Array | null, o: Float32Array, opts: object): PromiseLike<unknown>;
  destroy(): PromiseLike<unknown>;
}

if (process.env.PROCESS_AB_ROOT) {
  // A rank of one gang: the checkout at PROCESS_AB_ROOT.
  const m = (await import(pathToFileURL(resolve(process.env.PROCESS_AB_ROOT, 'src/index.ts')).href)) as { init(o: object): Promise<Comm> };
  const comm = await m.init({ backend: 'gloo' });
  const mode = process.env.PROCESS_AB_MODE!;
  const count = Math.max(comm.size, Math.floor(Number(process.env.PROCESS_AB_BYTES) / 4));
  const per = Math.floor(count / comm.size);
  const input = new Float32Array(count).fill(1);
  const output = new Float32Array(count);
  const call: () => PromiseLike<unknown> = {
    broadcast: () => comm.broadcast(input, { root: 0 }),
    allreduce: () => comm.allReduce(input),
    allgather: () => comm.allGather(input.subarray(0, per), output.subarray(0, per * comm.size)),
    gather: () => comm.gather(input.subarray(0, per), comm.rank === 0 ? output.subarray(0, per * comm.size) : null, { root: 0 }),
    scatter: () => comm.scatter(comm.rank === 0 ? input.subarray(0, per * comm.size) : null, output.subarray(0, per), { root: 0 }),
  }[mode]!;
  const calls = Number(process.env.PROCESS_AB_CALLS);
  const blocks: number[] = [];
  for (let i = 0; i < 50; i++) await call();
  for (let b = 0; b < Number(process.env.PROCESS_AB_BLOCKS); b++) {
    await comm.barrier();
    blocks.push(median(await timeBackToBack(calls, call)));
  }
  if (comm.rank === 0) process.stdout.write(`${JSON.stringify({ us: median(blocks), blocks })}\n`);
  await comm.destroy();
} else {
  const { values: a } = parseArgs({
    options: {
      against: { type: 'string' },
      'against-env': { type: 'string' },
      ranks: { type: 'string', default: '2' },
      mode: { type: 'string', default: 'broadcast' },
      bytes: { type: 'string', default: '524288' },
      runs: { type: 'string', default: '4' },
      blocks: { type: 'string', default: '6' },
      calls: { type: 'string', default: '1000' },
      json: { type: 'string' },
    },
  });
  if (!['broadcast', 'allreduce', 'allgather', 'gather', 'scatter'].includes(a.mode!)) throw new Error(`process-ab: --mode must be broadcast, allreduce, allgather, gather or scatter, received ${a.mode}`);
  const self = fileURLToPath(import.meta.url);
  const { roots, env: sideEnv, against } = sidesOf('process-ab', resolve(fileURLToPath(new URL('../..', import.meta.url))),
    a.against, a['against-env']);
  const ranks = Number(a.ranks);
  const runs: { this: number[]; against: number[] } = { this: [], against: [] };
  const blocks: { this: number[]; against: number[] } = { this: [], against: [] };
  for (let run = 0; run < Number(a.runs); run++) {
    for (const side of ['against', 'this'] as const) {
      const port = await freePort();
      const [line] = await gang<{ us: number; blocks: number[] }>(ranks, (rank) => [process.execPath, ['--import', 'tsx', self], {
        ...process.env, PROCESS_AB_ROOT: roots[side], PROCESS_AB_MODE: a.mode, PROCESS_AB_BYTES: a.bytes, PROCESS_AB_BLOCKS: a.blocks,
        PROCESS_AB_CALLS: a.calls, RANK: String(rank), LOCAL_RANK: String(rank), WORLD_SIZE: String(ranks),
        LOCAL_WORLD_SIZE: String(ranks), MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port), NCCL_NODE_TOKEN: 'process-ab',
        ...sideEnv[side],
      }]);
      runs[side].push(us(line!.us));
      blocks[side].push(...line!.blocks.map(us));
      process.stderr.write(`run ${run + 1} ${side}: ${us(line!.us)} µs (blocks ${line!.blocks.map(us).join(' ')})\n`);
    }
  }
  const row = {
    ranks, mode: a.mode, bytes: Number(a.bytes), thisUs: us(median(runs.this)), againstUs: us(median(runs.against)),
    ratio: Number((median(runs.this) / median(runs.against)).toFixed(3)),
    thisRange: `${Math.min(...runs.this)}-${Math.max(...runs.this)}`, againstRange: `${Math.min(...runs.against)}-${Math.max(...runs.against)}`,
    thisBlockMean: us(mean(blocks.this)), againstBlockMean: us(mean(blocks.against)),
    blockMeanRatio: Number((mean(blocks.this) / mean(blocks.against)).toFixed(3)),
  };
  console.log(`# ${a.mode} of ${a.bytes} bytes, ${ranks} ranks: this checkout against ${against}, rank 0's µs per awaited call, median over ${a.runs} runs of separate processes`);
  console.table([row]);
  if (a.json) writeFileSync(a.json, `${JSON.stringify({ bench: 'process-ab', shm: process.env.NCCL_NODE_SHM ?? null, against, runs, blocks, rows: [row] }, null, 2)}\n`);
}
