/**
 * `nccl-node run --cpu-bind exclusive` against the same job unbound: gangs started by the
 * real launcher, the two sides alternating gang by gang (--runs each, unbound first). Each
 * rank times --blocks blocks of --calls awaited calls of --mode back to back; per block
 * rank 0's median µs per call and the span (the slowest rank's time for the block over
 * --calls, as nccl-tests times a rank's loop). Per side: the median over runs of rank 0's
 * per-run median, the mean over every block, the median span, and the blocks slower than
 * 1.5x the fastest block of either side (a rank's threads moved or doubled up on a core).
 * A benchmark, not a test; table and JSON.
 *
 *   [NCCL_NODE_SHM=0] node --import tsx bench/launch/cpu-bind.ts [--ranks 2] [--mode allreduce|broadcast|allgather]
 *        [--bytes 524288] [--runs 6] [--blocks 6] [--calls 300] [--json out.json]
 */
import { spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { init } from '../../src/index.js';
import { mean, median } from '../stats.js';
import { timeBackToBack } from '../timing.js';

interface Result { us: number; blocks: number[]; spans: number[]; cpus: string | null }

if (process.env.CPU_BIND_WORKER) {
  const comm = await init({ backend: 'gloo' });
  const mode = process.env.CPU_BIND_MODE!;
  const count = Math.max(comm.size, Math.floor(Number(process.env.CPU_BIND_BYTES) / 4));
  const per = Math.floor(count / comm.size);
  const input = new Float32Array(count).fill(1);
  const output = new Float32Array(count);
  const call: () => PromiseLike<unknown> = {
    allreduce: () => comm.allReduce(input),
    broadcast: () => comm.broadcast(input, { root: 0 }),
    allgather: () => comm.allGather(input.subarray(0, per), output.subarray(0, per * comm.size)),
  }[mode]!;
  const calls = Number(process.env.CPU_BIND_CALLS);
  const blocks: number[] = [];
  const spans: number[] = [];
  const slowest = new Float64Array(1);
  for (let i = 0; i < 50; i++) await call();
  for (let b = 0; b < Number(process.env.CPU_BIND_BLOCKS); b++) {
    await comm.barrier();
    const t0 = performance.now();
    blocks.push(median(await timeBackToBack(calls, call)));
    slowest[0] = ((performance.now() - t0) * 1000) / calls;
    await comm.allReduce(slowest, { op: 'max' });
    spans.push(slowest[0]);
  }
  const r: Result = { us: median(blocks), blocks, spans, cpus: process.env.NCCL_NODE_CPUS ?? null };
  if (comm.rank === 0) process.stdout.write(`${JSON.stringify(r)}\n`);
  await comm.destroy();
} else {
  const { values: a } = parseArgs({
    options: {
      ranks: { type: 'string', default: '2' },
      mode: { type: 'string', default: 'allreduce' },
      bytes: { type: 'string', default: '524288' },
      runs: { type: 'string', default: '6' },
      blocks: { type: 'string', default: '6' },
      calls: { type: 'string', default: '300' },
      json: { type: 'string' },
    },
  });
  if (!['allreduce', 'broadcast', 'allgather'].includes(a.mode!)) throw new Error(`cpu-bind: --mode must be allreduce, broadcast or allgather, received ${a.mode}`);
  const self = fileURLToPath(import.meta.url);
  const bin = fileURLToPath(new URL('../../bin/nccl-node.js', import.meta.url));
  const gangOf = (bind: boolean): Promise<Result> => new Promise((resolve, reject) => {
    const args = [bin, 'run', '--nproc-per-node', a.ranks!, ...(bind ? ['--cpu-bind', 'exclusive'] : []), self];
    const p = spawn(process.execPath, args, {
      env: { ...process.env, CPU_BIND_WORKER: '1', CPU_BIND_MODE: a.mode, CPU_BIND_BYTES: a.bytes, CPU_BIND_BLOCKS: a.blocks, CPU_BIND_CALLS: a.calls },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out.trim().split('\n').at(-1)!) as Result) : reject(new Error(`nccl-node run exited with ${code}`))));
  });
  const sides = { unbound: [] as Result[], exclusive: [] as Result[] };
  for (let run = 0; run < Number(a.runs); run++) {
    for (const side of ['unbound', 'exclusive'] as const) {
      const r = await gangOf(side === 'exclusive');
      sides[side].push(r);
      process.stderr.write(`run ${run + 1} ${side}${r.cpus ? ` (rank 0 on ${r.cpus})` : ''}: ${r.us.toFixed(1)} µs, span ${median(r.spans).toFixed(1)} (blocks ${r.blocks.map((x) => x.toFixed(0)).join(' ')})\n`);
    }
  }
  const fastest = Math.min(...[...sides.unbound, ...sides.exclusive].flatMap((r) => r.blocks));
  const summary = (rs: Result[]) => {
    const blocks = rs.flatMap((r) => r.blocks);
    return {
      us: Number(median(rs.map((r) => r.us)).toFixed(1)),
      range: `${Math.min(...rs.map((r) => r.us)).toFixed(1)}-${Math.max(...rs.map((r) => r.us)).toFixed(1)}`,
      blockMean: Number(mean(blocks).toFixed(1)),
      spanUs: Number(median(rs.flatMap((r) => r.spans)).toFixed(1)),
      slowBlocks: `${blocks.filter((b) => b > 1.5 * fastest).length}/${blocks.length}`,
    };
  };
  const u = summary(sides.unbound);
  const e = summary(sides.exclusive);
  const row = {
    ranks: Number(a.ranks), mode: a.mode, bytes: Number(a.bytes), shm: process.env.NCCL_NODE_SHM ?? null,
    exclusiveUs: e.us, unboundUs: u.us, ratio: Number((e.us / u.us).toFixed(3)), exclusiveRange: e.range, unboundRange: u.range,
    blockMeanRatio: Number((e.blockMean / u.blockMean).toFixed(3)), exclusiveSpanUs: e.spanUs, unboundSpanUs: u.spanUs,
    spanRatio: Number((e.spanUs / u.spanUs).toFixed(3)), exclusiveSlowBlocks: e.slowBlocks, unboundSlowBlocks: u.slowBlocks,
  };
  console.log(`# ${a.mode} of ${a.bytes} bytes, ${a.ranks} ranks under nccl-node run: --cpu-bind exclusive against unbound, rank 0's µs per awaited call (median over ${a.runs} runs), spans the slowest rank's`);
  console.table([row]);
  if (a.json) writeFileSync(a.json, `${JSON.stringify({ bench: 'cpu-bind', rows: [row], runs: sides }, null, 1)}\n`);
}
