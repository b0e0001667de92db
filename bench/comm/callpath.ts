/**
 * The call path of a collective (TypeScript -> native -> TypeScript), per call:
 *
 *   awaited  one all-reduce at a time, each awaited before the next (latency);
 *   queued   N all-reduces issued back to back, then all awaited (nccl-tests'
 *            timing: issue N, wait for all), per call = total / N.
 *
 * At 1 rank (a 4-byte float32 sum, no network) the difference to the same
 * algorithm called from C++ (bench/gloo_direct.cpp, `algoUs`) is the path alone.
 * At 2 ranks the mid sizes (128 KiB, 512 KiB) compare queued with awaited calls.
 * Each mode runs with the calling-thread completion on (default) and off
 * (NCCL_NODE_INLINE_COMPLETION=0: every op goes through the worker thread and
 * the thread-safe function, the path before it), in the same run. Every figure is
 * a median (a shared host stalls a few calls for a scheduler tick).
 * A benchmark, not a test; table and JSON.
 *
 *   node --import tsx bench/comm/callpath.ts [--iters 3000] [--queue 64] [--sizes 128K,512K]
 *        [--no-ranks2] [--json out.json]
 */
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../test/helpers/ranks.js';
import { gang } from '../gang.js';
import { median } from '../stats.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1]! : def;
};
const ITERS = Number(arg('--iters', '3000'));
const QUEUE = Number(arg('--queue', '64'));
const bytesOf = (s: string) => Number.parseFloat(s) * ({ K: 1024, M: 1024 ** 2 }[s.slice(-1)] ?? 1);
const SIZES = arg('--sizes', '128K,512K').split(',').map(bytesOf);

interface Point { ranks: number; bytes: number; mode: 'awaited' | 'queued'; us: number; calls: number }


/** One rank of a run (this file, started with BENCH_ROLE=rank): prints rank 0's points as JSON lines. */
async function rankMain(): Promise<void> {
  const { init } = await import('../../src/index.js');
  const comm = await init({ backend: 'gloo' });
  const sizes = comm.size === 1 ? [4] : SIZES;
  const out: Point[] = [];
  for (const bytes of sizes) {
    const buf = new Float32Array(bytes / 4).fill(1);
    // Large calls: fewer of them, the run stays a few seconds.
    const iters = bytes <= 4096 ? ITERS : Math.max(20, Math.floor(ITERS / 30));
    const queue = bytes <= 4096 ? QUEUE : Math.max(4, Math.floor(QUEUE / 4));
    for (let i = 0; i < (bytes <= 4096 ? 3000 : 20); i++) await comm.allReduce(buf); // warm-up (JIT, connections)
    await comm.barrier();
    const t = new Float64Array(iters);
    // Each call from the end of the one before, as the C++ side (bench/direct_common.h).
    let t0 = performance.now();
    for (let i = 0; i < iters; i++) {
      await comm.allReduce(buf);
      const t1 = performance.now();
      t[i] = (t1 - t0) * 1000;
      t0 = t1;
    }
    out.push({ ranks: comm.size, bytes, mode: 'awaited', us: median(t), calls: iters });
    await comm.barrier();
    const reps = Math.max(5, Math.floor(iters / queue));
    const q = new Float64Array(reps);
    const works = new Array<PromiseLike<void>>(queue);
    for (let r = 0; r < reps; r++) {
      const t0 = performance.now();
      for (let i = 0; i < queue; i++) works[i] = comm.allReduce(buf);
      await Promise.all(works);
      q[r] = ((performance.now() - t0) * 1000) / queue;
    }
    out.push({ ranks: comm.size, bytes, mode: 'queued', us: median(q), calls: reps * queue });
    await comm.barrier();
  }
  if (comm.rank === 0) for (const p of out) process.stdout.write(`${JSON.stringify(p)}\n`);
  await comm.destroy();
}

async function addon(ranks: number, inline: boolean): Promise<Point[]> {
  const port = await freePort();
  const self = fileURLToPath(import.meta.url);
  return gang<Point>(ranks, (rank) => [process.execPath, ['--import', 'tsx', self, ...process.argv.slice(2)], {
    ...process.env, BENCH_ROLE: 'rank', NCCL_NODE_INLINE_COMPLETION: inline ? '1' : '0', RANK: String(rank),
    LOCAL_RANK: String(rank), WORLD_SIZE: String(ranks), MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port),
    NCCL_NODE_TOKEN: 'callpath',
  }]);
}

/** bench/gloo_direct.cpp at `ranks`: the addon's algorithm (checkCollectives off) from C++. */
async function direct(ranks: number, min: number, max: number): Promise<{ size: number; ringUs: number; algoUs: number }[]> {
  const bin = [process.env.GLOO_DIRECT, join(ROOT, 'build/gloo_direct'), join(ROOT, 'build/Release/gloo_direct')]
    .find((p) => p && existsSync(p));
  if (!bin) throw new Error('gloo_direct not found: build it with `bash scripts/setup.sh` or set GLOO_DIRECT');
  const dir = mkdtempSync(join(tmpdir(), 'gloo_direct-'));
  return gang(ranks, (rank) => [bin, [String(rank), String(ranks), dir, String(ITERS), String(min), String(max)], { ...process.env }]);
}

async function main(): Promise<void> {
  const rows: Record<string, number | string>[] = [];
  const cpp1 = await direct(1, 4, 4);
  const on1 = await addon(1, true);
  const off1 = await addon(1, false);
  const runs2 = process.argv.includes('--no-ranks2') ? undefined : [await addon(2, true), await addon(2, false)] as const;
  const cpp2 = runs2 ? await direct(2, Math.min(...SIZES), Math.max(...SIZES)) : [];
  const find = (ps: Point[], bytes: number, mode: string) => ps.find((p) => p.bytes === bytes && p.mode === mode)!.us;
  for (const [ranks, on, off, cpp] of [[1, on1, off1, cpp1], ...(runs2 ? [[2, runs2[0], runs2[1], cpp2] as const] : [])] as const) {
    for (const bytes of [...new Set(on.map((p) => p.bytes))]) {
      const c = cpp.find((x) => x.size === bytes);
      rows.push({
        ranks, bytes,
        awaitedUs: find(on, bytes, 'awaited'), queuedUs: find(on, bytes, 'queued'),
        oldAwaitedUs: find(off, bytes, 'awaited'), oldQueuedUs: find(off, bytes, 'queued'),
        cppUs: c?.algoUs ?? Number.NaN,
      });
    }
  }
  const cols = ['ranks', 'bytes', 'awaitedUs', 'queuedUs', 'oldAwaitedUs', 'oldQueuedUs', 'cppUs'];
  const pad = (s: string | number) => String(s).padStart(13);
  console.log('# all-reduce float32 sum (gloo), per-call microseconds, medians; old* = NCCL_NODE_INLINE_COMPLETION=0;');
  console.log(`# queued = ${QUEUE} (1 rank) or ${Math.max(4, Math.floor(QUEUE / 4))} (2 ranks) calls issued, then all awaited; cppUs = bench/gloo_direct algoUs`);
  console.log(`# ${cols.map(pad).join(' ')}`);
  for (const r of rows) console.log(`  ${cols.map((k) => pad(typeof r[k] === 'number' && !Number.isInteger(r[k]) ? (r[k] as number).toFixed(2) : r[k]!)).join(' ')}`);
  const doc = { bench: 'callpath', node: process.version, iters: ITERS, queue: QUEUE, rows };
  console.log(JSON.stringify(doc));
  const out = arg('--json', '');
  if (out) writeFileSync(out, `${JSON.stringify(doc, null, 1)}\n`);
}

if (process.env.BENCH_ROLE === 'rank') await rankMain();
else await main();
