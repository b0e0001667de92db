/**
 * calibrate(): micro-benchmarks of this machine, saved as a hardware profile
 * (./profile.ts) that plan() takes in place of a datasheet GPU and predict() turns
 * into step times of the example models:
 * - matmul: linear + linearBackward of src/models/tiny-lm/kernels.ts (the kernels
 *   TinyLM and GPT run) and GPT's attention kernels, FLOP/s; the CPU peak is
 *   src/metrics/flops.ts's measureCpuPeak();
 * - memory: a Float32Array copy, bytes/s (what the optimizer step streams at);
 * - all-reduce: `nccl-node bench`'s sweep through the addon on `ranks` local ranks
 *   started by the gang launcher, with the ring model fitted to it;
 * - disk: write + fsync of one file in a temporary directory.
 * Each timed loop reports the median of five rounds: predict() estimates the median
 * training step, which runs under whatever else shares the machine (the peak, by
 * contrast, is measureCpuPeak's best round).
 */
import { mkdtemp, open, readFile, rm } from 'node:fs/promises';
import { cpus, hostname, tmpdir, totalmem, availableParallelism } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { NcclNodeError } from '../errors.js';
import { Launcher } from '../launch/launcher.js';
import { measureCpuPeak } from '../metrics/flops.js';
import { attention, attentionBackward } from '../models/gpt/layers.js';
import { linear, linearBackward } from '../models/tiny-lm/kernels.js';
import { parseProfile, PROFILE_KIND, type Calibration, type HardwareProfile } from './profile.js';

export interface CalibrateOptions {
  /** Milliseconds per timed kernel (default 400). */
  ms?: number;
  /** Shape of the matmul timed: rows·in → out (default TinyLM's block: 64 rows, 256 → 1021). */
  matmul?: { rows: number; inDim: number; outDim: number };
  /** Shape of the attention timed (default T 32, dim 64, 4 heads, 2 sequences). */
  attention?: { T: number; dim: number; heads: number; batch?: number };
  /** Ranks of the all-reduce sweep (default 2; at least 2) and its sizes. */
  ranks?: number;
  minBytes?: number;
  maxBytes?: number;
  iters?: number;
  backend?: 'gloo' | 'nccl' | 'auto';
  /** Bytes written for the disk measurement (default 64 MiB) and where (default the OS temp dir). */
  diskBytes?: number;
  diskDir?: string;
  /** Deadline of the all-reduce gang (default 120 s). */
  timeoutMs?: number;
}

function medianRate(ms: number, work: number, run: () => void): number {
  run(); // warm-up: compile the loops
  const rates: number[] = [];
  const rounds = 5;
  for (let r = 0; r < rounds; r++) {
    let reps = 0;
    const t0 = performance.now();
    let t = t0;
    do { run(); reps++; t = performance.now(); } while (t - t0 < ms / rounds);
    rates.push((reps * work) / ((t - t0) / 1000));
  }
  return rates.sort((x, y) => x - y)[(rounds - 1) / 2]!;
}

const filled = (n: number, seed: number) => Float32Array.from({ length: n }, (_, i) => (((i * 7 + seed) % 13) - 6) * 1e-2);

/** linear + linearBackward (with dx), 6·rows·in·out FLOPs per pass, FLOP/s. */
export function measureMatmul(shape: { rows: number; inDim: number; outDim: number }, ms = 400): number {
  const { rows: n, inDim: i, outDim: o } = shape;
  const x = filled(n * i, 1), w = filled(i * o, 2), b = filled(o, 3), y = new Float32Array(n * o);
  const dx = new Float32Array(n * i), dw = new Float32Array(i * o), db = new Float32Array(o);
  return medianRate(ms, 6 * n * i * o, () => {
    linear(x, w, b, y, n, i, o);
    linearBackward(x, w, y, dx, dw, db, n, i, o);
    dw.fill(0); // keeps gradients from growing without bound over many passes
  });
}

/** GPT's causal attention forward + backward: 12·dim FLOPs per visited (query, key) pair. */
export function measureAttention(s: { T: number; dim: number; heads: number; batch?: number }, ms = 400): number {
  const batch = s.batch ?? 2;
  const shape = { batch, T: s.T, D: s.dim, heads: s.heads };
  const qkv = filled(batch * s.T * 3 * s.dim, 4), att = new Float32Array(batch * s.T * s.dim);
  const datt = filled(batch * s.T * s.dim, 5), dqkv = new Float32Array(qkv.length);
  const pairs = batch * (s.T * (s.T + 1)) / 2;
  return medianRate(ms, 12 * s.dim * pairs, () => {
    const probs = attention(qkv, att, shape);
    attentionBackward(qkv, probs, datt, dqkv, shape);
  });
}

/** Float32Array.set of `bytes`: read + written bytes per second. */
export function measureMemoryBandwidth(bytes = 32 * 2 ** 20, ms = 200): number {
  const a = new Float32Array(bytes / 4).fill(1), b = new Float32Array(bytes / 4);
  return medianRate(ms, 2 * bytes, () => b.set(a));
}

/** Writes `bytes` to a new file in a temporary directory under `dir` and fsyncs it; bytes/s. */
export async function measureDisk(bytes = 64 * 2 ** 20, dir = tmpdir()): Promise<{ dir: string; bytes: number; seconds: number; bandwidth: number }> {
  const where = await mkdtemp(join(dir, 'nccl-node-calibrate-'));
  try {
    const chunk = Buffer.alloc(Math.min(bytes, 4 * 2 ** 20), 0x5a);
    const f = await open(join(where, 'data'), 'w');
    const t0 = performance.now();
    try {
      for (let done = 0; done < bytes; done += chunk.length) await f.write(chunk, 0, Math.min(chunk.length, bytes - done));
      await f.sync();
    } finally {
      await f.close();
    }
    const seconds = (performance.now() - t0) / 1000;
    return { dir, bytes, seconds, bandwidth: bytes / seconds };
  } finally {
    await rm(where, { recursive: true, force: true });
  }
}

/**
 * Least-squares line t = a + b·bytes through the sweep, read as the ring model on n
 * ranks, t = 2(n−1)·α + (2(n−1)/n)·bytes/B: α = a/(2(n−1)), B = 2(n−1)/(n·b). A
 * non-positive slope falls back to the best measured bus bandwidth, and a non-positive
 * intercept (noise: small calls that all take about the same time, as one-round
 * all-reduces do) to the fastest measured call, an upper bound on the latency: no
 * profile claims a free step.
 */
export function fitRing(rows: readonly { bytes: number; timeUs: number; busBw: number }[], n: number): { latencySeconds: number; busBandwidth: number } {
  const xs = rows.map((r) => r.bytes), ts = rows.map((r) => r.timeUs / 1e6);
  const k = xs.length;
  const mx = xs.reduce((s, x) => s + x, 0) / k, mt = ts.reduce((s, t) => s + t, 0) / k;
  const sxx = xs.reduce((s, x) => s + (x - mx) ** 2, 0);
  const slope = sxx > 0 ? xs.reduce((s, x, i) => s + (x - mx) * (ts[i]! - mt), 0) / sxx : 0;
  const peak = Math.max(...rows.map((r) => r.busBw)) * 1e9; // nccl-tests' GB/s
  const busBandwidth = slope > 0 ? (2 * (n - 1)) / (n * slope) : peak;
  const fitted = slope > 0 ? mt - slope * mx : 0;
  const intercept = fitted > 0 ? fitted : Math.min(...ts);
  return { latencySeconds: intercept / (2 * (n - 1)), busBandwidth };
}

const RANK_SCRIPT = fileURLToPath(new URL(`./calibrate-rank${import.meta.url.endsWith('.ts') ? '.ts' : '.js'}`, import.meta.url));

/** The sweep on `ranks` fresh local processes under the gang launcher; rank 0's rows. */
export async function measureAllReduce(o: { ranks: number; minBytes: number; maxBytes: number; iters: number; backend: string; timeoutMs: number }): Promise<Calibration['allReduce']> {
  if (!Number.isInteger(o.ranks) || o.ranks < 2) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `calibrate: ranks: expected an integer >= 2 (the sweep needs a peer), got ${o.ranks}`);
  const dir = await mkdtemp(join(tmpdir(), 'nccl-node-calibrate-ar-'));
  const out = join(dir, 'sweep.json');
  const log = new PassThrough();
  const held: string[] = [];
  log.on('data', (d: Buffer) => held.push(d.toString()));
  try {
    const launcher = await Launcher.start({
      script: RANK_SCRIPT, nprocPerNode: o.ranks, masterPort: 0, stdout: log, stderr: log, prefix: true,
      scriptArgs: ['--out', out, '--min', String(o.minBytes), '--max', String(o.maxBytes), '--iters', String(o.iters), '--warmup', '2', '--backend', o.backend, '--timeout', String(o.timeoutMs)],
    });
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<'timeout'>((r) => (timer = setTimeout(() => r('timeout'), o.timeoutMs)));
    const first = await Promise.race([launcher.done, deadline]);
    if (first === 'timeout') {
      launcher.interrupt('SIGTERM');
      await launcher.done;
      throw new NcclNodeError('ERR_TIMEOUT', `calibrate: expected the all-reduce sweep on ${o.ranks} ranks within ${o.timeoutMs} ms, got no result; output: ${held.join('').slice(-2000)}`);
    }
    clearTimeout(timer);
    if (first.exitCode !== 0) {
      throw new NcclNodeError('ERR_LAUNCH', `calibrate: expected the all-reduce sweep ranks to exit 0, got ${first.message}; output: ${held.join('').slice(-2000)}`);
    }
    const r = JSON.parse(await readFile(out, 'utf8')) as { ranks: number; backend: string; errors: number; rows: { bytes: number; timeUs: number; busBw: number }[] };
    if (r.errors > 0) throw new NcclNodeError('ERR_BACKEND', `calibrate: expected correct all-reduce results, got ${r.errors} wrong measurements`);
    const rows = r.rows.map((x) => ({ bytes: x.bytes, timeUs: x.timeUs, busBw: x.busBw }));
    return { ranks: r.ranks, backend: r.backend, rows, ...fitRing(rows, r.ranks) };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

export async function calibrate(o: CalibrateOptions = {}): Promise<HardwareProfile> {
  const ms = o.ms ?? 400;
  const cores = availableParallelism();
  const peak = measureCpuPeak().flops;
  const mm = o.matmul ?? { rows: 64, inDim: 256, outDim: 1021 };
  const at = o.attention ?? { T: 32, dim: 64, heads: 4 };
  const matmul = { ...mm, flopsPerSecond: measureMatmul(mm, ms) };
  const attn = { T: at.T, dim: at.dim, heads: at.heads, flopsPerSecond: measureAttention(at, ms) };
  const memoryBandwidth = measureMemoryBandwidth();
  const disk = await measureDisk(o.diskBytes, o.diskDir);
  const allReduce = await measureAllReduce({
    ranks: o.ranks ?? 2, minBytes: o.minBytes ?? 4096, maxBytes: o.maxBytes ?? 4 * 2 ** 20, iters: o.iters ?? 10,
    backend: o.backend ?? 'gloo', timeoutMs: o.timeoutMs ?? 120_000,
  });
  const memoryBytes = totalmem();
  return parseProfile({
    kind: PROFILE_KIND, version: 1, measuredAt: new Date().toISOString(),
    host: { hostname: hostname(), cpuModel: cpus()[0]?.model ?? 'unknown', node: process.version, memoryBytes },
    // One rank per core: the memory and the network (all local ranks on this machine's loopback) are per rank.
    gpu: {
      name: `CPU rank (${hostname()}, ${cores} cores)`, peakBf16Flops: peak, hbmBytes: memoryBytes / cores, hbmBandwidth: memoryBandwidth,
      nvlinkBandwidth: allReduce.busBandwidth, ibBandwidth: allReduce.busBandwidth, nvlinkDomain: cores,
    },
    efficiency: Math.min(1, matmul.flopsPerSecond / peak),
    storageBandwidth: disk.bandwidth,
    calibration: { cores, cpuPeakFlops: peak, matmul, attention: attn, memoryBandwidth, allReduce, disk },
  });
}
