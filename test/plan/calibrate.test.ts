/**
 * Calibration and prediction: `plan --calibrate` on this machine (tiny settings)
 * against a direct disk measurement made here, its profile against the schema and
 * `plan --hardware`; predict() against arithmetic done here from the models' own
 * parameter counts and layer shapes for a hand-made profile; fitRing() against
 * rows generated from known constants.
 */
import { spawnSync } from 'node:child_process';
import { closeSync, fsyncSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { GPT, GPT_TEST_CONFIG } from '../../src/models/gpt/gpt.js';
import { TEST_CONFIG, TinyLM } from '../../src/models/tiny-lm/tiny-lm.js';
import { fitRing } from '../../src/plan/calibrate.js';
import { predict } from '../../src/plan/predict.js';
import { parseProfile, profileSchema, type HardwareProfile } from '../../src/plan/profile.js';
import { repoRoot } from '../helpers/ranks.js';

const dir = mkdtempSync(join(tmpdir(), 'nccl-node-calibrate-test-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const cli = (args: string[]) => spawnSync(process.execPath, [join(repoRoot, 'bin/nccl-node.js'), ...args], { encoding: 'utf8', timeout: 50_000 });

function numbers(v: unknown, path = ''): [string, number][] {
  if (typeof v === 'number') return [[path, v]];
  if (Array.isArray(v)) return v.flatMap((x, i) => numbers(x, `${path}[${i}]`));
  if (v && typeof v === 'object') return Object.entries(v).flatMap(([k, x]) => numbers(x, `${path}.${k}`));
  return [];
}

/** write + fsync of `bytes` in 4 MiB chunks, the test's own measurement. */
function diskBandwidth(bytes: number): number {
  const f = join(dir, 'direct');
  const chunk = Buffer.alloc(4 * 2 ** 20, 0xa5);
  const fd = openSync(f, 'w');
  const t0 = performance.now();
  for (let done = 0; done < bytes; done += chunk.length) writeSync(fd, chunk, 0, Math.min(chunk.length, bytes - done));
  fsyncSync(fd);
  const s = (performance.now() - t0) / 1000;
  closeSync(fd);
  rmSync(f);
  return bytes / s;
}

describe('plan --calibrate', () => {
  const file = join(dir, 'hw.json');
  const DISK = 16 * 2 ** 20;
  const direct = diskBandwidth(DISK);
  const r = cli(['plan', '--calibrate', '--json', '--out', file, '--calibrate-ms', '60', '--calibrate-max-bytes', '65536', '--disk-bytes', String(DISK), '--disk-dir', dir]);

  it('measures positive finite numbers and saves a profile the schema accepts', () => {
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { profile: HardwareProfile; predictions: { model: string; ranks: number; prediction: { stepSeconds: number } }[] };
    const saved = JSON.parse(readFileSync(file, 'utf8'));
    expect(profileSchema.safeParse(saved).success).toBe(true);
    expect(saved).toEqual(out.profile);
    const nums = numbers(out.profile);
    expect(nums.length).toBeGreaterThan(20);
    for (const [path, x] of nums) expect(Number.isFinite(x) && x > 0, path).toBe(true);
    expect(out.profile.calibration.allReduce.rows.map((x) => x.bytes)).toEqual([4096, 8192, 16384, 32768, 65536]);
    expect(out.profile.calibration.allReduce.ranks).toBe(2);
    // Predictions for TinyLM and GPT at 1, 2, 4 ranks, all positive and finite.
    expect(out.predictions.map((p) => `${p.model}x${p.ranks}`)).toEqual(['tiny-lmx1', 'tiny-lmx2', 'tiny-lmx4', 'gptx1', 'gptx2', 'gptx4']);
    for (const p of out.predictions) for (const [path, x] of numbers(p.prediction)) expect(Number.isFinite(x) && x >= 0, path).toBe(true);
  });

  it('measures the disk bandwidth a direct write + fsync here measures, within a factor of 10', () => {
    const p = parseProfile(JSON.parse(readFileSync(file, 'utf8')));
    expect(p.calibration.disk.bytes).toBe(DISK);
    const ratio = p.calibration.disk.bandwidth / direct;
    expect(ratio, `calibrate ${p.calibration.disk.bandwidth}, direct ${direct}`).toBeGreaterThan(0.1);
    expect(ratio).toBeLessThan(10);
  });

  it('plan --hardware takes the profile: its GPU figures, efficiency and storage bandwidth', () => {
    const p = parseProfile(JSON.parse(readFileSync(file, 'utf8')));
    const res = cli(['plan', '--hardware', file, '--params', '1e6', '--seq', '32', '--tokens', '1e9', '--gpus', '2', '--dp', '2', '--precision', 'fp32', '--zero', '0', '--json']);
    expect(res.status, res.stderr).toBe(0);
    const plan = JSON.parse(res.stdout);
    expect(plan.gpu).toEqual(p.gpu);
    // fp32 Adam checkpoint: 4 + 8 bytes per parameter at the profile's disk bandwidth.
    expect(plan.checkpoint.writeSeconds).toBeCloseTo((12 * 1e6) / p.storageBandwidth, 9);
    // Compute at efficiency × peak: 6·N·tokens / (2 · peak · efficiency).
    const tokens = 2 * 32;
    expect(plan.best.computeSeconds).toBeCloseTo((6 * 1e6 * tokens) / (2 * p.gpu.peakBf16Flops * p.efficiency), 9);
  });

  it('simulate --hardware --checkpoint-bytes stalls bytes / the profile\'s disk bandwidth per checkpoint', () => {
    const p = parseProfile(JSON.parse(readFileSync(file, 'utf8')));
    const common = ['simulate', '--gpus', '1024', '--hours', '200', '--seed', '5', '--json'];
    const a = cli([...common, '--hardware', file, '--checkpoint-bytes', '3e9']);
    const b = cli([...common, '--checkpoint-seconds', String(3e9 / p.storageBandwidth)]);
    expect(a.status, a.stderr).toBe(0);
    expect(JSON.parse(a.stdout)).toEqual(JSON.parse(b.stdout));
    // Young's default interval √(2·C·M): twice the bytes, √2 times the interval.
    const c = cli([...common, '--hardware', file, '--checkpoint-bytes', '6e9']);
    expect(JSON.parse(c.stdout).intervalSeconds / JSON.parse(a.stdout).intervalSeconds).toBeCloseTo(Math.SQRT2, 9);
  });

  it('a broken profile is ERR_INVALID_ARGUMENT naming the field', () => {
    const bad = join(dir, 'bad.json');
    const p = JSON.parse(readFileSync(file, 'utf8'));
    p.calibration.disk.bandwidth = -1;
    writeFileSync(bad, JSON.stringify(p));
    const res = cli(['plan', '--hardware', bad, '--params', '1e6', '--tokens', '1e9', '--gpus', '2', '--mfu', '0.5']);
    expect(res.status).toBe(2);
    expect(res.stderr).toMatch(/ERR_INVALID_ARGUMENT.*calibration\.disk\.bandwidth/);
  });
});

describe('predict() on a hand-made profile', () => {
  const MiB = 2 ** 20;
  const [alpha, B, matmul, attn, mem, disk] = [1e-4, 1e8, 1e9, 5e8, 1e10, 2e8];
  const profile = (cores: number) => ({
    cores, cpuPeakFlops: 2e9, matmul: { rows: 1, inDim: 1, outDim: 1, flopsPerSecond: matmul },
    attention: { T: 1, dim: 1, heads: 1, flopsPerSecond: attn }, memoryBandwidth: mem,
    allReduce: { ranks: 2, backend: 'gloo', rows: [{ bytes: 1, timeUs: 1, busBw: 1 }], latencySeconds: alpha, busBandwidth: B },
    disk: { dir: '/tmp', bytes: 1, seconds: 1, bandwidth: disk },
  });
  const ring = (n: number, bytes: number) => 2 * (n - 1) * alpha + ((2 * (n - 1)) / n) * (bytes / B);

  it('TinyLM: compute + AdamW + fully exposed bucketed all-reduce when ranks fill the cores', () => {
    const cfg = TEST_CONFIG;
    const N = new TinyLM(cfg).numParams; // the model's own count
    // Matmuls the model runs per token: w1 [D,H], w2 [H,D] per block, head [D,V]; 2 FLOPs/MAC forward, 4 backward.
    const perToken = 6 * (cfg.layers * 2 * cfg.dim * cfg.hidden + cfg.dim * cfg.vocab);
    for (const n of [1, 2, 4]) {
      const p = predict(profile(2), { model: { kind: 'tiny-lm', config: cfg }, ranks: n, globalBatch: 8 });
      const tokens = (8 / n) * cfg.seqLen;
      const share = Math.max(1, n / 2);
      expect(p.params).toBe(N);
      expect(p.computeSeconds).toBeCloseTo((tokens * perToken / matmul) * share, 12);
      expect(p.optimizerSeconds).toBeCloseTo((n * N * 28) / mem, 12);
      // 4·N bytes of gradients: a 1 MiB bucket, then the rest (under 25 MiB), then the loss.
      const grads = 4 * N;
      const ar = n === 1 ? 0 : ring(n, MiB) + ring(n, grads - MiB) + ring(n, 8);
      expect(p.buckets).toBe(2);
      expect(p.allReduceSeconds).toBeCloseTo(ar, 12);
      expect(p.exposedAllReduceSeconds).toBeCloseTo(ar, 12);
      expect(p.stepSeconds).toBeCloseTo(p.computeSeconds + p.optimizerSeconds + ar, 12);
      expect(p.checkpoint.bytes).toBe(12 * N);
      expect(p.stepWithCheckpointSeconds - p.stepSeconds).toBeCloseTo((12 * N) / disk, 12);
    }
  });

  it('GPT: attention FLOPs at their own rate; backward hides the all-reduce while a core is free', () => {
    const cfg = GPT_TEST_CONFIG;
    const N = new GPT(cfg).numParams;
    const { dim: D, hidden: H, layers: L, vocab: V, seqLen: T } = cfg;
    const perToken = 6 * (L * (D * 3 * D + D * D + D * H + H * D) + D * V);
    // Causal: query i visits i+1 keys; QKᵀ and A·V cost 2·D each forward per pair, twice that backward.
    const pairsPerSeq = (T * (T + 1)) / 2;
    const attnPerSeq = L * pairsPerSeq * 12 * D;
    const p = predict(profile(8), { model: { kind: 'gpt', config: cfg }, ranks: 2, globalBatch: 4 });
    expect(p.params).toBe(N);
    const compute = 2 * T * perToken / matmul + (2 * attnPerSeq) / attn;
    expect(p.computeSeconds).toBeCloseTo(compute, 12);
    const ar = ring(2, 4 * N) + ring(2, 8); // under 1 MiB: one bucket
    expect(p.buckets).toBe(1);
    expect(p.allReduceSeconds).toBeCloseTo(ar, 12);
    expect(p.exposedAllReduceSeconds).toBeCloseTo(Math.max(0, ar - (2 / 3) * compute), 12);
  });

  it('rejects a batch the ranks do not divide', () => {
    expect(() => predict(profile(2), { model: { kind: 'tiny-lm', config: TEST_CONFIG }, ranks: 3, globalBatch: 8 })).toThrow(/ERR_INVALID_ARGUMENT|multiple of ranks/);
  });
});

describe('fitRing', () => {
  it('recovers α and B from times made by the ring model', () => {
    const [alpha, B, n] = [3e-5, 2.5e8, 4];
    const rows = [4096, 65536, 1 << 20, 1 << 22].map((bytes) => {
      const t = 2 * (n - 1) * alpha + ((2 * (n - 1)) / n) * (bytes / B);
      return { bytes, timeUs: t * 1e6, busBw: ((bytes / t) * (2 * (n - 1)) / n) / 1e9 };
    });
    const f = fitRing(rows, n);
    expect(f.latencySeconds / alpha).toBeCloseTo(1, 6);
    expect(f.busBandwidth / B).toBeCloseTo(1, 6);
  });

  it('a line through small calls that fits a negative intercept takes the fastest call as the latency, not 0', () => {
    // Small calls nearly free, the larger ones growing faster than a line: the least-squares
    // line crosses zero above the smallest size (intercept -6 µs).
    const times = [5, 6, 9, 30, 80];
    const rows = [4096, 8192, 16384, 32768, 65536].map((bytes, i) => ({ bytes, timeUs: times[i]!, busBw: bytes / times[i]! / 1e3 }));
    const f = fitRing(rows, 2);
    expect(f.latencySeconds).toBeCloseTo(5e-6 / 2, 12);
    expect(f.busBandwidth).toBeGreaterThan(0);
  });
});
