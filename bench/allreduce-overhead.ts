/**
 * The addon's per-call cost: all-reduce (float32 sum, in place) from 8 B up
 * through nccl-node (TypeScript -> N-API -> native worker -> backend), next to
 * the same calls made from C++ with no addon in between, run by this script on
 * the same machine:
 *
 *   gloo  bench/gloo_direct.cpp times Gloo's own all-reduce (ring) and the addon's
 *         algorithm without the addon (algo: checkCollectives off, chk: on);
 *   nccl  bench/nccl_direct.cpp times ncclAllReduce + a spin on cuEventQuery, through
 *         the addon's loaders (real libraries, or the stand-ins with --standins).
 *
 * addon - C++ of the same algorithm is the cost of the path from TypeScript to the
 * native worker and back. With --ranks 1 there is no network at all, so the
 * difference is that path alone. Each call is awaited before the next, like the
 * C++ loops: latency, not throughput; every figure is the median per-call time (a
 * mean on a shared host is dominated by the few calls a scheduler tick stalls).
 * A benchmark, not a test; table and JSON.
 *
 *   node --import tsx bench/allreduce-overhead.ts [--backend gloo|nccl] [--ranks 2]
 *        [--standins] [--iters 200] [--max 64M] [--json out.json]
 */
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../test/helpers/ranks.js';
import { gang } from './gang.js';
import { median } from './stats.js';
import { timeBackToBack } from './timing.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1]! : def;
};
const BACKEND = arg('--backend', 'gloo');
const RANKS = Number(arg('--ranks', '2'));
const ITERS = Number(arg('--iters', '200'));
const MAX = arg('--max', '64M');
const maxBytes = Number.parseFloat(MAX) * ({ K: 1024, M: 1024 ** 2, G: 1024 ** 3 }[MAX.slice(-1)] ?? 1);
const itersFor = (bytes: number) => (bytes >= 1 << 20 ? Math.max(5, Math.floor(ITERS / 20)) : ITERS);
const standins = join(ROOT, 'build/standins');
const libEnv: Record<string, string> = process.argv.includes('--standins')
  ? { NCCL_NODE_LIBCUDA: join(standins, 'libcuda.so.1'), NCCL_NODE_LIBNCCL: join(standins, 'libnccl.so.2') }
  : {};

interface Point { size: number; us: number }
type Row = Record<string, number>;

/** One rank of the addon sweep (this file, started with BENCH_ROLE=rank). */
async function rankMain(): Promise<void> {
  const { init, DeviceBuffer } = await import('../src/index.js');
  const nccl = BACKEND === 'nccl';
  const comm = await init({ backend: nccl ? 'nccl' : 'gloo', checkCollectives: process.env.BENCH_CHECK === '1' });
  const host = nccl ? undefined : new Float32Array(maxBytes / 4 + 1).fill(1);
  const device = nccl ? DeviceBuffer.alloc({ dtype: 'float32', length: maxBytes / 4 + 1 }) : undefined;
  for (let bytes = 8; bytes <= maxBytes; bytes *= 2) {
    const view = device ? device.view(0, bytes / 4) : host!.subarray(0, bytes / 4);
    const call = () => comm.allReduce(view as Float32Array);
    for (let i = 0; i < 3; i++) await call(); // warm-up, as the C++ loops
    await comm.barrier();
    const n = itersFor(bytes);
    const us = (await timeBackToBack(n, call)).sort()[n >> 1]!;
    if (comm.rank === 0) process.stdout.write(`${JSON.stringify({ size: bytes, us: Number(us.toFixed(3)), iters: n })}\n`);
  }
  await comm.destroy();
  device?.dispose();
}

async function addonSweep(check: boolean): Promise<Point[]> {
  const port = await freePort();
  const self = fileURLToPath(import.meta.url);
  return gang<Point>(RANKS, (rank) => [process.execPath, ['--import', 'tsx', self, ...process.argv.slice(2)], {
    ...process.env, ...libEnv, BENCH_ROLE: 'rank', BENCH_CHECK: check ? '1' : '0', RANK: String(rank),
    LOCAL_RANK: String(rank), WORLD_SIZE: String(RANKS), MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port),
    NCCL_NODE_TOKEN: 'allreduce-overhead',
  }]);
}

function directSweep<T>(name: string): Promise<T[]> {
  const bin = [process.env[name.toUpperCase()], join(ROOT, 'build', name), join(ROOT, 'build/Release', name)]
    .find((p) => p && existsSync(p));
  if (!bin) throw new Error(`${name} not found: build it with \`bash scripts/setup.sh\` or set ${name.toUpperCase()}`);
  const dir = mkdtempSync(join(tmpdir(), `${name}-`));
  return gang<T>(RANKS, (rank) => [bin, [String(rank), String(RANKS), dir, String(ITERS), '8', MAX], { ...process.env, ...libEnv }]);
}

/** Gloo: Gloo's ring, the addon's algorithm in C++, the addon; check off and on. */
async function glooRows(): Promise<Row[]> {
  const base = await directSweep<{ size: number; ringUs: number; algoUs: number; checkUs: number }>('gloo_direct');
  const on = await addonSweep(true);
  const off = await addonSweep(false);
  return base.map((g, i) => ({
    size: g.size, glooRingUs: g.ringUs, algoUs: g.algoUs, addonUs: off[i]!.us, overheadUs: off[i]!.us - g.algoUs,
    algoCheckUs: g.checkUs, addonCheckUs: on[i]!.us, overheadCheckUs: on[i]!.us - g.checkUs,
    ringOverAddonCheck: g.ringUs / on[i]!.us,
  }));
}

/** NCCL: ncclAllReduce from C++, and through the addon. */
async function ncclRows(): Promise<Row[]> {
  const base = await directSweep<Point>('nccl_direct');
  const addon = await addonSweep(false);
  return base.map((b, i) => ({ size: b.size, ncclUs: b.us, addonUs: addon[i]!.us, overheadUs: addon[i]!.us - b.us }));
}

async function main(): Promise<void> {
  if (BACKEND !== 'gloo' && BACKEND !== 'nccl') throw new Error(`--backend must be gloo or nccl, received ${BACKEND}`);
  const rows = BACKEND === 'gloo' ? await glooRows() : await ncclRows();
  const cols = Object.keys(rows[0]!);
  const pad = (s: string | number) => String(s).padStart(12);
  const cell = (k: string, v: number) => (k === 'size' ? String(v) : k.endsWith('Us') ? v.toFixed(1) : v.toFixed(2));
  console.log(`# all-reduce float32 sum, ${BACKEND}, ${RANKS} rank(s), in place; per-call microseconds (awaited one by one)`);
  console.log('# overhead* = addon minus the same algorithm called from C++ = the TypeScript-to-native path');
  console.log(`# ${cols.map(pad).join(' ')}`);
  for (const r of rows) console.log(`  ${cols.map((k) => pad(cell(k, r[k]!))).join(' ')}`);
  const small = rows.filter((r) => r.size! <= 4096);
  const summary: Record<string, number> = {};
  for (const k of cols.filter((c) => c.startsWith('overhead') || c.startsWith('ringOver'))) {
    summary[`median_${k}_upTo4K`] = Number(median(small.map((r) => r[k]!)).toFixed(2));
  }
  console.log(`# median over 8 B..4 KiB: ${Object.entries(summary).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  const doc = { bench: 'allreduce-overhead', backend: BACKEND, ranks: RANKS, dtype: 'float32', iters: ITERS, node: process.version, rows, summary };
  console.log(JSON.stringify(doc));
  const out = arg('--json', '');
  if (out) writeFileSync(out, `${JSON.stringify(doc, null, 1)}\n`);
}

if (process.env.BENCH_ROLE === 'rank') await rankMain();
else await main();
