/**
 * All-reduce between ranks of one host through shared memory (NCCL_NODE_SHM=1,
 * the default) against the same calls over Gloo's TCP on loopback (NCCL_NODE_SHM=0),
 * both through the addon from TypeScript, and against raw Gloo from C++ without
 * the addon (bench/gloo_algos.cpp: the fastest of its all-reduce algorithms per
 * size), the blocking call's shared-memory round from C++ alone (build/shm_round: the floor
 * under allReduceSync), and, where Open MPI is installed (build/mpi_collectives, cmake/bench.cmake),
 * Open MPI's MPI_Allreduce over its shared-memory transport (vader) and its TCP
 * transport on loopback, all measured by this script on the same machine. float32 sum, in
 * place, on the same array each time:
 *   shm          each call awaited before the next; prepared from its second call and made
 *                as the prepared call's start() (src/comm/repeated-calls.ts)
 *   shmFull      the same with NCCL_NODE_PREPARE_REPEATED=0: every call checked and built anew
 *   shmSync      the blocking allReduceSync() instead, prepared from its second call (run())
 *   shmSyncFull  the same with NCCL_NODE_PREPARE_REPEATED=0
 *   shmPrepared  that call prepared once with prepareAllReduce() and made with run();
 * per run the median per-call time on rank 0 (each call timed from the end of the one
 * before, here and in the C++ baselines). The
 * runs alternate --rounds times; a figure is the median of the rounds' medians, with
 * their spread (min-max) for the shared-memory path and Open MPI's. Bus bandwidth as
 * nccl-tests defines it: bytes x 2(n-1)/n / time. A benchmark, not a test; table and JSON.
 *
 *   node --import tsx bench/shm/allreduce.ts [--ranks 2] [--iters 200] [--min 8]
 *        [--max 64M] [--rounds 1] [--no-gloo] [--no-mpi] [--json out.json]
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../test/helpers/ranks.js';
import { gang } from '../gang.js';
import { median } from '../stats.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const arg = (name: string, def: string): string => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1]! : def;
};
const bytesOf = (s: string): number => Number.parseFloat(s) * ({ K: 1024, M: 1024 ** 2, G: 1024 ** 3 }[s.slice(-1)] ?? 1);
const RANKS = Number(arg('--ranks', '2'));
const ITERS = Number(arg('--iters', '200'));
const MIN = arg('--min', '8');
const MAX = arg('--max', '64M');
const ROUNDS = Number(arg('--rounds', '1'));
const itersFor = (bytes: number): number => (bytes >= 1 << 20 ? Math.max(5, Math.floor(ITERS / 20)) : ITERS);

interface Point { size: number; us: number; iters?: number }

/** One rank of an addon sweep (this file, started with BENCH_ROLE=rank). */
async function rankMain(): Promise<void> {
  const { init } = await import('../../src/index.js');
  const comm = await init({ backend: 'gloo' });
  const max = bytesOf(MAX);
  const host = new Float32Array(max / 4 + 1).fill(1);
  // Once, before the first size: enough calls for the JIT to compile the call path
  // (50 were not: the first size measured came out 2-3x the next ones).
  const sync = process.env.BENCH_SYNC === '1';
  const prepared = process.env.BENCH_SYNC === 'prepared';
  const first = prepared ? comm.prepareAllReduce(host.subarray(0, 1)) : undefined;
  for (let i = 0; i < 2000; i++) {
    if (first) first.run();
    else if (sync) comm.allReduceSync(host.subarray(0, 1));
    else await comm.allReduce(host.subarray(0, 1));
  }
  first?.free();
  // The first size twice, the first time not reported: the timing loops below get
  // compiled during it (the prepared calls' first size came out 1.5-2x the next ones).
  const lowest = Math.max(4, bytesOf(MIN));
  for (let bytes = lowest, warm = true; bytes <= max; warm ? (warm = false) : (bytes *= 2)) {
    const view = host.subarray(0, bytes / 4);
    // Small sizes: enough calls to leave JIT compilation and the first-call costs behind.
    for (let i = 0; i < (bytes < 1 << 20 ? 50 : 3); i++) await comm.allReduce(view);
    await comm.barrier();
    const n = itersFor(bytes);
    // A call's time is from the end of the one before (one clock read a call, as the
    // C++ baselines time theirs: bench/direct_common.h): a read costs about 80 ns from
    // JavaScript here, a fifth of the fastest call when read twice.
    const times = new Float64Array(n);
    if (prepared) {
      const call = comm.prepareAllReduce(view);
      for (let i = 0; i < 50; i++) call.run();
      let t0 = performance.now();
      for (let i = 0; i < n; i++) {
        call.run();
        const t1 = performance.now();
        times[i] = (t1 - t0) * 1000;
        t0 = t1;
      }
      call.free();
    } else if (sync) {
      let t0 = performance.now();
      for (let i = 0; i < n; i++) {
        comm.allReduceSync(view);
        const t1 = performance.now();
        times[i] = (t1 - t0) * 1000;
        t0 = t1;
      }
    } else {
      let t0 = performance.now();
      for (let i = 0; i < n; i++) {
        await comm.allReduce(view);
        const t1 = performance.now();
        times[i] = (t1 - t0) * 1000;
        t0 = t1;
      }
    }
    if (comm.rank === 0 && !warm) process.stdout.write(`${JSON.stringify({ size: bytes, us: Number(times.sort()[n >> 1]!.toFixed(3)), iters: n })}\n`);
  }
  await comm.destroy();
}

async function addonSweep(shm: boolean, env: Record<string, string> = {}): Promise<Point[]> {
  const port = await freePort();
  const self = fileURLToPath(import.meta.url);
  return gang<Point>(RANKS, (rank) => [process.execPath, ['--import', 'tsx', self, ...process.argv.slice(2)], {
    ...process.env, ...env, BENCH_ROLE: 'rank', NCCL_NODE_SHM: shm ? '1' : '0', RANK: String(rank), LOCAL_RANK: String(rank),
    WORLD_SIZE: String(RANKS), MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port), NCCL_NODE_TOKEN: 'shm-bench',
  }]);
}

/** Raw Gloo: per size the fastest of gloo_algos' all-reduce algorithms. */
async function glooBest(): Promise<Map<number, { us: number; algo: string }>> {
  const best = new Map<number, { us: number; algo: string }>();
  const bin = [process.env.GLOO_ALGOS, join(ROOT, 'build/gloo_algos')].find((p) => p && existsSync(p));
  if (!bin || process.argv.includes('--no-gloo')) return best;
  const dir = mkdtempSync(join(tmpdir(), 'shm-bench-gloo-'));
  const rows = await gang<{ coll: string; algo: string; size: number; us: number }>(RANKS, (rank) =>
    [bin, [String(rank), String(RANKS), dir, String(ITERS), String(Math.max(64, bytesOf(MIN))), MAX], process.env]);
  // gloo_algos also times the backend's own ring from C++ (own-tcp-ring): not raw Gloo, never the baseline.
  for (const r of rows.filter((x) => x.coll === 'allreduce' && x.algo !== 'own-tcp-ring')) {
    const b = best.get(r.size);
    if (!b || r.us < b.us) best.set(r.size, { us: r.us, algo: r.algo });
  }
  return best;
}

/**
 * Open MPI from C++ (bench/mpi_collectives.cpp) over one BTL: `vader` (shared memory)
 * or `tcp` (loopback). Per size its MPI_Allreduce median, or an empty map when Open MPI
 * or the binary is missing.
 */
async function mpi(btl: 'vader' | 'tcp'): Promise<Map<number, number>> {
  const out = new Map<number, number>();
  const bin = join(ROOT, 'build/mpi_collectives');
  if (!existsSync(bin) || process.argv.includes('--no-mpi')) return out;
  const args = ['--oversubscribe', '-np', String(RANKS), '--mca', 'pml', 'ob1', '--mca', 'btl', `self,${btl}`,
    ...(btl === 'tcp' ? ['--mca', 'btl_tcp_if_include', 'lo'] : []), bin, String(ITERS), String(bytesOf(MIN)), MAX];
  // Open MPI refuses root unless told twice; these machines and containers run as root.
  const env = { ...process.env, OMPI_ALLOW_RUN_AS_ROOT: '1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1' };
  try {
    const { stdout } = await promisify(execFile)('mpirun', args, { env, maxBuffer: 16 << 20, timeout: 600_000 });
    for (const line of stdout.split('\n').filter((l) => l.startsWith('{'))) {
      const r = JSON.parse(line) as { coll: string; size: number; us: number };
      if (r.coll === 'allreduce') out.set(r.size, r.us);
    }
  } catch (err) {
    console.error(`# Open MPI (${btl}) not measured: ${(err as Error).message.split('\n')[0]}`);
  }
  return out;
}

/**
 * The shared-memory round of a small blocking call from C++ (bench/shm_round.cpp: the
 * segment code alone, no addon, no JavaScript), up to the 32 KiB that round carries. Per
 * size its median, or an empty map when the binary is missing.
 */
async function shmRound(): Promise<Map<number, number>> {
  const out = new Map<number, number>();
  const bin = join(ROOT, 'build/shm_round');
  if (!existsSync(bin)) return out;
  // Sub-microsecond rounds: many more calls than the addon's runs for a steady median.
  const { stdout } = await promisify(execFile)(bin, [String(RANKS), String(ITERS * 50), String(bytesOf(MIN)), String(bytesOf(MAX))], { timeout: 600_000 });
  for (const line of stdout.split('\n').filter((l) => l.startsWith('{'))) {
    const r = JSON.parse(line) as { size: number; us: number };
    out.set(r.size, r.us);
  }
  return out;
}

const range = (xs: number[]): string => (xs.length > 1 ? `${Math.min(...xs)}-${Math.max(...xs)}` : '-');

async function main(): Promise<void> {
  const perSize = (): Map<number, number[]> => new Map();
  const runs = { shm: perSize(), shmFull: perSize(), shmSync: perSize(), shmSyncFull: perSize(), shmPrepared: perSize(), shmWorker: perSize(), tcp: perSize(), gloo: perSize(), mpiShm: perSize(), mpiTcp: perSize(), roundCpp: perSize() };
  const glooAlgo = new Map<number, Map<string, number>>();
  const add = (m: Map<number, number[]>, size: number, us: number): void => void (m.get(size) ?? m.set(size, []).get(size)!).push(us);
  for (let round = 0; round < ROUNDS; round++) {
    for (const p of await addonSweep(true)) add(runs.shm, p.size, p.us);
    for (const p of await addonSweep(true, { NCCL_NODE_PREPARE_REPEATED: '0' })) add(runs.shmFull, p.size, p.us);
    for (const p of await addonSweep(true, { BENCH_SYNC: '1' })) add(runs.shmSync, p.size, p.us);
    for (const p of await addonSweep(true, { BENCH_SYNC: '1', NCCL_NODE_PREPARE_REPEATED: '0' })) add(runs.shmSyncFull, p.size, p.us);
    for (const p of await addonSweep(true, { BENCH_SYNC: 'prepared' })) add(runs.shmPrepared, p.size, p.us);
    // The same path with small calls always finished by the worker thread (docs/gloo.md,
    // "Small calls on the calling thread"), as before that existed.
    for (const p of await addonSweep(true, { NCCL_NODE_SHM_CALLER_SPIN_US: '0' })) add(runs.shmWorker, p.size, p.us);
    for (const p of await addonSweep(false)) add(runs.tcp, p.size, p.us);
    for (const [size, g] of await glooBest()) {
      add(runs.gloo, size, g.us);
      const algos = glooAlgo.get(size) ?? glooAlgo.set(size, new Map()).get(size)!;
      algos.set(g.algo, (algos.get(g.algo) ?? 0) + 1);
    }
    for (const [size, us] of await mpi('vader')) add(runs.mpiShm, size, us);
    for (const [size, us] of await mpi('tcp')) add(runs.mpiTcp, size, us);
    for (const [size, us] of await shmRound()) add(runs.roundCpp, size, us);
  }
  const bus = (bytes: number, us: number): number => (bytes * (2 * (RANKS - 1)) / RANKS) / (us * 1e-6) / 1e9;
  const med = (m: Map<number, number[]>, size: number): number | null => (m.has(size) ? median(m.get(size)!) : null);
  // The median of the rounds' ratios (each round's two runs ran minutes apart at most,
  // so a ratio within a round is less exposed to the host's slow and fast phases).
  const roundRatio = (a: Map<number, number[]>, b: Map<number, number[]>, size: number): number | null => {
    const xs = a.get(size);
    const ys = b.get(size);
    if (!xs || !ys || xs.length !== ys.length) return null;
    return Number(median(xs.map((x, i) => x / ys[i]!)).toFixed(2));
  };
  const rows = [...runs.shm.keys()].map((size) => {
    const s = med(runs.shm, size)!;
    const t = med(runs.tcp, size)!;
    const g = med(runs.gloo, size);
    const m = med(runs.mpiShm, size);
    // The algorithm that was fastest in most rounds.
    const algo = [...(glooAlgo.get(size) ?? new Map<string, number>())].sort((a, b) => b[1] - a[1])[0]?.[0] ?? null;
    return {
      size, shmUs: s, shmRange: range(runs.shm.get(size)!), shmFullUs: med(runs.shmFull, size),
      shmOverFull: roundRatio(runs.shm, runs.shmFull, size), shmSyncUs: med(runs.shmSync, size),
      shmSyncRange: range(runs.shmSync.get(size)!), shmSyncFullUs: med(runs.shmSyncFull, size),
      shmSyncOverFull: roundRatio(runs.shmSync, runs.shmSyncFull, size), shmPreparedUs: med(runs.shmPrepared, size),
      shmPreparedRange: range(runs.shmPrepared.get(size)!), shmWorkerUs: med(runs.shmWorker, size), tcpUs: t,
      glooBestUs: g, glooBestAlgo: algo,
      shmBusGBs: Number(bus(size, s).toFixed(3)), tcpBusGBs: Number(bus(size, t).toFixed(3)),
      glooBusGBs: g ? Number(bus(size, g).toFixed(3)) : null,
      tcpOverShm: Number((t / s).toFixed(2)), glooOverShm: g ? Number((g / s).toFixed(2)) : null,
      mpiShmUs: m, mpiShmRange: runs.mpiShm.has(size) ? range(runs.mpiShm.get(size)!) : null, mpiTcpUs: med(runs.mpiTcp, size),
      shmOverMpiShm: roundRatio(runs.shm, runs.mpiShm, size),
      shmSyncOverMpiShm: roundRatio(runs.shmSync, runs.mpiShm, size),
      shmSyncFullOverMpiShm: roundRatio(runs.shmSyncFull, runs.mpiShm, size),
      shmPreparedOverMpiShm: roundRatio(runs.shmPrepared, runs.mpiShm, size),
      roundCppUs: med(runs.roundCpp, size), roundCppRange: runs.roundCpp.has(size) ? range(runs.roundCpp.get(size)!) : null,
      roundCppOverMpiShm: m && runs.roundCpp.has(size) ? Number((med(runs.roundCpp, size)! / m).toFixed(2)) : null,
    };
  });
  const cols = Object.keys(rows[0]!) as (keyof (typeof rows)[number])[];
  const pad = (v: unknown): string => String(v ?? '-').padStart(13);
  console.log(`# all-reduce float32 sum, ${RANKS} ranks on one host, in place; median microseconds per awaited call, median of ${ROUNDS} round(s)`);
  console.log('# shm: NCCL_NODE_SHM=1 (shared memory), tcp: NCCL_NODE_SHM=0 (Gloo TCP loopback), glooBest: raw Gloo from C++, fastest algorithm');
  console.log('# shm: the awaited call on one array (prepared from its second call); shmFull: the same with NCCL_NODE_PREPARE_REPEATED=0; shmOverFull: median of the per-round ratios');
  console.log('# shmSync: the same calls through the blocking allReduceSync() on one array (prepared from its second call)');
  console.log('# shmSyncFull: the same with NCCL_NODE_PREPARE_REPEATED=0 (every call checked and built anew); shmSyncOverFull and *OverMpiShm: median of the per-round ratios');
  console.log('# shmPrepared: the same blocking call prepared once (prepareAllReduce) and run() each time');
  console.log('# shmWorker: the same with NCCL_NODE_SHM_CALLER_SPIN_US=0 (every call finished by the worker thread)');
  console.log('# mpiShm / mpiTcp: Open MPI MPI_Allreduce from C++ over vader (shared memory) / tcp (loopback); ranges: min-max over rounds');
  console.log('# roundCpp: the shared-memory round a small blocking call makes, from C++ without the addon (bench/shm_round.cpp), up to 32 KiB');
  console.log(`# ${cols.map(pad).join(' ')}`);
  for (const r of rows) console.log(`  ${cols.map((k) => pad(r[k])).join(' ')}`);
  const rounds = Object.fromEntries(Object.entries(runs).map(([k, m]) => [k, Object.fromEntries(m)]));
  const doc = { bench: 'shm-allreduce', ranks: RANKS, dtype: 'float32', iters: ITERS, rounds: ROUNDS, node: process.version, rows, perRound: rounds };
  console.log(JSON.stringify(doc));
  const out = arg('--json', '');
  if (out) writeFileSync(out, `${JSON.stringify(doc, null, 1)}\n`);
}

if (process.env.BENCH_ROLE === 'rank') await rankMain();
else await main();
