/**
 * One rank of bench/comm/sweep.ts: times all-reduce, all-gather, reduce-scatter, all-to-all,
 * broadcast, reduce, gather and scatter
 * (float32 sum, each call awaited before the next) through the addon's CPU backend
 * at every size of the sweep, with the same sizes, element counts, warm-up and
 * iteration counts as build/gloo_algos, so the two are compared call for call.
 * Rank 0 prints one JSON line per (collective, size): the median per-call µs, and for
 * broadcast, reduce, gather and scatter (root 0) also spanUs, the slowest rank's mean.
 *
 *   started by sweep.ts with SWEEP_SIZES=8,32,... SWEEP_ITERS=200 [SWEEP_LARGE_ITERS=20] and the job's env
 */
import { init } from '../../src/index.js';
import { timeBackToBack } from '../timing.js';

const SIZES = process.env.SWEEP_SIZES!.split(',').map(Number);
const ITERS = Number(process.env.SWEEP_ITERS ?? '200');
// SWEEP_COLLS=broadcast,gather,...: only these (unset: every collective).
const ONLY = process.env.SWEEP_COLLS ? new Set(process.env.SWEEP_COLLS.split(',')) : null;
const timed = (coll: string): boolean => ONLY === null || ONLY.has(coll);
const LARGE = 16 * 1024 * 1024;
// The schedule of bench/gloo_algos.cpp (itersFor, warm-up).
// SWEEP_LARGE_ITERS=n (sweep.ts --large-iters): n calls at every size from 1 MiB instead.
const LARGE_ITERS = Number(process.env.SWEEP_LARGE_ITERS ?? '0');
const itersFor = (bytes: number): number =>
  LARGE_ITERS > 0 && bytes >= 1 << 20 ? LARGE_ITERS : bytes >= LARGE ? 3 : bytes >= 1 << 20 ? Math.max(5, Math.floor(ITERS / 20)) : ITERS;
const warmupFor = (bytes: number): number => (bytes >= LARGE ? 1 : 3);

const comm = await init({ backend: 'gloo' });
const P = comm.size;
const maxCount = Math.max(...SIZES.map((b) => Math.max(1, Math.floor(b / 4)))) + P;
const input = new Float32Array(maxCount).fill(1);
const output = new Float32Array(maxCount + P);

async function time(bytes: number, call: () => PromiseLike<unknown>): Promise<number> {
  for (let i = 0; i < warmupFor(bytes); i++) await call();
  await comm.barrier();
  const n = itersFor(bytes);
  return (await timeBackToBack(n, call)).sort()[n >> 1]!;
}

// A rooted collective's time as every rank sees it, as build/gloo_algos measures it too:
// n calls back to back from a common start (a barrier), the slowest rank's time to its
// last call's return over n. rank 0's per-call time alone is its root's.
const span = new Float64Array(1);
async function spanOf(bytes: number, call: () => PromiseLike<unknown>): Promise<number> {
  await comm.barrier();
  const n = itersFor(bytes);
  const t0 = performance.now();
  for (let i = 0; i < n; i++) await call();
  span[0] = ((performance.now() - t0) * 1000) / n;
  await comm.allReduce(span, { op: 'max' });
  return span[0]!;
}

let warming = true;
const emit = (coll: string, size: number, us: number, spanUs?: number): void => {
  if (warming) return;
  const line = { coll, size, us: Number(us.toFixed(1)), ...(spanUs === undefined ? {} : { spanUs: Number(spanUs.toFixed(1)) }), iters: itersFor(size) };
  if (comm.rank === 0) process.stdout.write(`${JSON.stringify(line)}\n`);
};
const rooted = async (coll: string, bytes: number, call: () => PromiseLike<unknown>): Promise<void> =>
  emit(coll, bytes, await time(bytes, call), await spanOf(bytes, call));

// Untimed passes over every collective at the first size, `ITERS` calls each, before
// anything is timed: the first sizes would otherwise run while V8 compiles this loop and
// the library's call path, and collects what start-up left, on the host's cores (raw Gloo
// from C++ has none of it). One pass was not enough on 4 ranks of a 2-core host: the
// next two passes' spans (400 calls of 8-32 B) still held 1-8 calls of 1-8 ms, every rank
// stalled at once, 93-160 µs a call against 75-83 from the fourth pass on. Three were not
// either: with --trace-opt, each of the 4-rank spans that stalled 1-3 ms at every rank
// (the same points run after run, moving with the sizes' order, gone with --no-opt) came
// just after V8 finished optimizing a function of the call path on a background thread
// (0.6-10 ms of a core each, zod's parse the largest), on a host whose 2 cores the 4 ranks
// already filled. After 20 passes one such stall was left in 24 spans (bench/README.md).
const WARM_PASSES = 20;
for (const [i, bytes] of [...Array<number>(WARM_PASSES).fill(SIZES[0]!), ...SIZES].entries()) {
  warming = i < WARM_PASSES;
  const count = Math.max(1, Math.floor(bytes / 4));
  const per = Math.max(1, Math.floor(count / P));
  if (timed('allreduce')) emit('allreduce', bytes, await time(bytes, () => comm.allReduce(input.subarray(0, count))));
  // All-gather: `bytes` is the gathered output; reduce-scatter: the per-rank input.
  if (timed('allgather')) emit('allgather', bytes, await time(bytes, () => comm.allGather(input.subarray(0, per), output.subarray(0, per * P))));
  if (timed('reducescatter')) emit('reducescatter', bytes, await time(bytes, () => comm.reduceScatter(input.subarray(0, per * P), output.subarray(0, per))));
  // All-to-all: `bytes` is each rank's input and output, one block per rank.
  if (timed('alltoall')) emit('alltoall', bytes, await time(bytes, () => comm.allToAll(input.subarray(0, per * P), output.subarray(0, per * P))));
  // Root 0, as gloo_algos: a broadcast's and a reduce's buffer is `bytes`, a gather's
  // output and a scatter's input too.
  const root = comm.rank === 0;
  if (timed('broadcast')) await rooted('broadcast', bytes, () => comm.broadcast(input.subarray(0, count), { root: 0 }));
  if (timed('reduce')) await rooted('reduce', bytes, () => comm.reduce(input.subarray(0, count), { root: 0, out: output.subarray(0, count) }));
  if (timed('gather')) await rooted('gather', bytes, () => comm.gather(input.subarray(0, per), root ? output.subarray(0, per * P) : null, { root: 0 }));
  if (timed('scatter')) await rooted('scatter', bytes, () => comm.scatter(root ? input.subarray(0, per * P) : null, output.subarray(0, per), { root: 0 }));
}
await comm.destroy();
