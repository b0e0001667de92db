/**
 * All-reduce between ranks of one host through shared memory (NCCL_NODE_SHM=1,
 * the default) against the same calls over Gloo's TCP on loopback (NCCL_NODE_SHM=0),
 * both through the addon from TypeScript, and against raw Gloo from C++ without
 * the addon (bench/gloo_algos.cpp: the fastest of its all-reduce algorithms per
 * size), and, where Open MPI is installed (build/mpi_collectives, cmake/bench.cmake),
 * Open MPI's MPI_Allreduce over its shared-memory transport (vader) and its TCP
 * transport on loopback, all measured by this script on the same machine. float32 sum, in place,
 * each call awaited before the next; every figure is the median per-call time on
 * rank 0. Bus bandwidth as nccl-tests defines it: bytes x 2(n-1)/n / time.
 * A benchmark, not a test; table and JSON.
 *
 *   node --import tsx bench/shm/allreduce.ts [--ranks 2] [--iters 200] [--min 8]
 *        [--max 64M] [--no-gloo] [--no-mpi] [--json out.json]
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../test/helpers/ranks.js';
import { gang } from '../gang.js';

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
const itersFor = (bytes: number): number => (bytes >= 1 << 20 ? Math.max(5, Math.floor(ITERS / 20)) : ITERS);

interface Point { size: number; us: number; iters?: number }

/** One rank of an addon sweep (this file, started with BENCH_ROLE=rank). */
async function rankMain(): Promise<void> {
  const { init } = await import('../../src/index.js');
  const comm = await init({ backend: 'gloo' });
  const max = bytesOf(MAX);
  const host = new Float32Array(max / 4 + 1).fill(1);
  for (let bytes = Math.max(4, bytesOf(MIN)); bytes <= max; bytes *= 2) {
    const view = host.subarray(0, bytes / 4);
    // Small sizes: enough calls to leave JIT compilation and the first-call costs behind.
    for (let i = 0; i < (bytes < 1 << 20 ? 50 : 3); i++) await comm.allReduce(view);
    await comm.barrier();
    const n = itersFor(bytes);
    const times = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      await comm.allReduce(view);
      times[i] = (performance.now() - t0) * 1000;
    }
    if (comm.rank === 0) process.stdout.write(`${JSON.stringify({ size: bytes, us: Number(times.sort()[n >> 1]!.toFixed(3)), iters: n })}\n`);
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
  for (const r of rows.filter((x) => x.coll === 'allreduce')) {
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

async function main(): Promise<void> {
  const shm = await addonSweep(true);
  // The same path with small calls always finished by the worker thread (docs/gloo.md,
  // "Small calls on the calling thread"), as before that existed.
  const shmWorker = await addonSweep(true, { NCCL_NODE_SHM_CALLER_SPIN_US: '0' });
  const tcp = await addonSweep(false);
  const gloo = await glooBest();
  const mpiShm = await mpi('vader');
  const mpiTcp = await mpi('tcp');
  const bus = (bytes: number, us: number): number => (bytes * (2 * (RANKS - 1)) / RANKS) / (us * 1e-6) / 1e9;
  const rows = shm.map((s, i) => {
    const g = gloo.get(s.size);
    const t = tcp[i]!;
    return {
      size: s.size, shmUs: s.us, shmWorkerUs: shmWorker[i]!.us, tcpUs: t.us, glooBestUs: g?.us ?? null, glooBestAlgo: g?.algo ?? null,
      shmBusGBs: Number(bus(s.size, s.us).toFixed(3)), tcpBusGBs: Number(bus(s.size, t.us).toFixed(3)),
      glooBusGBs: g ? Number(bus(s.size, g.us).toFixed(3)) : null,
      tcpOverShm: Number((t.us / s.us).toFixed(2)), glooOverShm: g ? Number((g.us / s.us).toFixed(2)) : null,
      mpiShmUs: mpiShm.get(s.size) ?? null, mpiTcpUs: mpiTcp.get(s.size) ?? null,
      shmOverMpiShm: mpiShm.has(s.size) ? Number((s.us / mpiShm.get(s.size)!).toFixed(2)) : null,
    };
  });
  const cols = Object.keys(rows[0]!) as (keyof (typeof rows)[number])[];
  const pad = (v: unknown): string => String(v ?? '-').padStart(13);
  console.log(`# all-reduce float32 sum, ${RANKS} ranks on one host, in place; median microseconds per awaited call`);
  console.log('# shm: NCCL_NODE_SHM=1 (shared memory), tcp: NCCL_NODE_SHM=0 (Gloo TCP loopback), glooBest: raw Gloo from C++, fastest algorithm');
  console.log('# shmWorker: the same with NCCL_NODE_SHM_CALLER_SPIN_US=0 (every call finished by the worker thread)');
  console.log('# mpiShm / mpiTcp: Open MPI MPI_Allreduce from C++ over vader (shared memory) / tcp (loopback)');
  console.log(`# ${cols.map(pad).join(' ')}`);
  for (const r of rows) console.log(`  ${cols.map((k) => pad(r[k])).join(' ')}`);
  const doc = { bench: 'shm-allreduce', ranks: RANKS, dtype: 'float32', iters: ITERS, node: process.version, rows };
  console.log(JSON.stringify(doc));
  const out = arg('--json', '');
  if (out) writeFileSync(out, `${JSON.stringify(doc, null, 1)}\n`);
}

if (process.env.BENCH_ROLE === 'rank') await rankMain();
else await main();
