/**
 * The addon's per-call cost: all-reduce (float32 sum, in place, 2 ranks) from
 * 8 B to 64 MiB through nccl-node (TypeScript -> N-API -> Gloo), next to the same
 * sizes on Gloo called directly from C++ (bench/gloo_direct.cpp), run by this
 * script on the same machine. gloo_direct times both Gloo's own all-reduce (ring)
 * and the addon's algorithm without the addon (algo, check), so the table shows
 * the cost of the TypeScript-to-native path (addon - algo) apart from the gain of
 * the algorithm (ring / addon). Prints a table and JSON. A benchmark, not a test.
 *
 *   node --import tsx bench/allreduce-overhead.ts [--iters 200] [--max 64M] [--json out.json]
 *
 * Needs the addon (NCCL_NODE_ADDON or build/) and the gloo_direct binary
 * (GLOO_DIRECT, else build/gloo_direct, which scripts/setup.sh builds).
 * Each call is awaited before the next, like the C++ loop: latency, not throughput.
 * Runs twice through the addon: checkCollectives on (the default) and off.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const arg = (name: string, def: string) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1]! : def;
};
const ITERS = Number(arg('--iters', '200'));
const MAX = arg('--max', '64M');
const maxBytes = Number.parseFloat(MAX) * ({ K: 1024, M: 1024 ** 2, G: 1024 ** 3 }[MAX.slice(-1)] ?? 1);
const itersFor = (bytes: number) => (bytes >= 1 << 20 ? Math.max(5, Math.floor(ITERS / 20)) : ITERS);

interface Point { size: number; us: number }
interface Baseline { size: number; ringUs: number; algoUs: number; checkUs: number }

/** One rank of the addon sweep (this file, started with BENCH_ROLE=rank). */
async function rankMain(): Promise<void> {
  const { init } = await import('../src/index.js');
  const comm = await init({ checkCollectives: process.env.BENCH_CHECK === '1' });
  const buf = new Float32Array(maxBytes / 4 + 1).fill(1);
  for (let bytes = 8; bytes <= maxBytes; bytes *= 2) {
    const view = buf.subarray(0, bytes / 4);
    for (let i = 0; i < 3; i++) await comm.allReduce(view); // warm-up, as gloo_direct
    await comm.barrier();
    const n = itersFor(bytes);
    const t0 = performance.now();
    for (let i = 0; i < n; i++) await comm.allReduce(view);
    const us = ((performance.now() - t0) * 1000) / n;
    if (comm.rank === 0) process.stdout.write(`${JSON.stringify({ size: bytes, us: Number(us.toFixed(3)), iters: n })}\n`);
  }
  await comm.destroy();
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** Runs `cmd` once per rank and collects rank 0's JSON lines. */
async function gang<T>(cmd: (rank: number) => [string, string[], NodeJS.ProcessEnv]): Promise<T[]> {
  const outs = await Promise.all([0, 1].map((rank) => new Promise<string>((resolve, reject) => {
    const [file, args, env] = cmd(rank);
    const p = spawn(file, args, { env, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`${file} rank ${rank} exited with ${code}`))));
  })));
  return outs[0]!.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as T);
}

async function addonSweep(check: boolean): Promise<Point[]> {
  const port = await freePort();
  const self = fileURLToPath(import.meta.url);
  return gang<Point>((rank) => [process.execPath, ['--import', 'tsx', self, '--iters', String(ITERS), '--max', MAX], {
    ...process.env, BENCH_ROLE: 'rank', BENCH_CHECK: check ? '1' : '0', RANK: String(rank), LOCAL_RANK: String(rank),
    WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port), NCCL_NODE_TOKEN: 'allreduce-overhead',
  }]);
}

function glooSweep(): Promise<Baseline[]> {
  const bin = [process.env.GLOO_DIRECT, join(ROOT, 'build/gloo_direct'), join(ROOT, 'build/Release/gloo_direct')]
    .find((p) => p && existsSync(p));
  if (!bin) throw new Error('gloo_direct not found: build it with `bash scripts/setup.sh` or set GLOO_DIRECT');
  const dir = mkdtempSync(join(tmpdir(), 'gloo-direct-'));
  return gang<Baseline>((rank) => [bin, [String(rank), '2', dir, String(ITERS), '8', MAX], process.env]);
}

async function main(): Promise<void> {
  // Baseline first, then the addon with and without the agreement check.
  const gloo = await glooSweep();
  const on = await addonSweep(true);
  const off = await addonSweep(false);
  const pad = (s: string | number, w: number) => String(s).padStart(w);
  const f = (v: number) => v.toFixed(1);
  const cols = ['size', 'gloo ring', 'algo C++', 'addon', 'd(addon)', 'chk C++', '+check', 'd(check)', 'ring/addon'];
  console.log('# all-reduce float32 sum, 2 ranks, in place; per-call microseconds (awaited one by one)');
  console.log('# gloo ring: gloo::allreduce; algo/chk C++: the addon\'s algorithm in C++ without the addon (check off/on);');
  console.log('# d(...): addon minus the same algorithm in C++ = the TypeScript-to-native path');
  console.log(`# ${cols.map((c) => pad(c, 10)).join(' ')}`);
  const rows = gloo.map((g, i) => {
    const a = off[i]!;
    const c = on[i]!;
    const row = {
      size: g.size, glooRingUs: g.ringUs, algoUs: g.algoUs, addonUs: a.us, overheadUs: a.us - g.algoUs,
      algoCheckUs: g.checkUs, addonCheckUs: c.us, overheadCheckUs: c.us - g.checkUs, ringOverAddonCheck: g.ringUs / c.us,
    };
    const cells = [row.size, f(row.glooRingUs), f(row.algoUs), f(row.addonUs), f(row.overheadUs), f(row.algoCheckUs),
      f(row.addonCheckUs), f(row.overheadCheckUs), row.ringOverAddonCheck.toFixed(2)];
    console.log(`  ${cells.map((c) => pad(c, 10)).join(' ')}`);
    return row;
  });
  const small = rows.filter((r) => r.size <= 4096);
  const median = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
  const summary = {
    medianOverheadUsUpTo4K: median(small.map((r) => r.overheadUs)),
    medianOverheadCheckUsUpTo4K: median(small.map((r) => r.overheadCheckUs)),
    medianRingOverAddonCheckUpTo4K: median(small.map((r) => r.ringOverAddonCheck)),
  };
  console.log(`# median over 8 B..4 KiB: TypeScript-to-native path ${f(summary.medianOverheadUsUpTo4K)} us (check off), ${f(summary.medianOverheadCheckUsUpTo4K)} us (check on); gloo::allreduce / addon with check = ${summary.medianRingOverAddonCheckUpTo4K.toFixed(2)}x`);
  const doc = { bench: 'allreduce-overhead', ranks: 2, dtype: 'float32', iters: ITERS, node: process.version, rows, summary };
  console.log(JSON.stringify(doc));
  const out = arg('--json', '');
  if (out) writeFileSync(out, `${JSON.stringify(doc, null, 1)}\n`);
}

if (process.env.BENCH_ROLE === 'rank') await rankMain();
else await main();
