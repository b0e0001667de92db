/**
 * plan() against back-of-the-envelope arithmetic done here from first principles
 * (datasheet numbers and the formulas of the cited papers), never through the
 * module's own helpers.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { plan } from '../../src/plan/index.js';
import { isNcclNodeError } from '../../src/errors.js';

const H100_PEAK = 989e12; // NVIDIA H100 SXM datasheet, dense BF16
const H100_HBM = 80e9;

describe('1T parameters on 100k H100s, 15T tokens, 40 % MFU', () => {
  const N = 1e12;
  const D = 15e12;
  const gpus = 100_000;
  // Per-GPU MTBF of 50,000 h (5.7 years): 100,000 GPUs then fail every 0.5 h. Llama 3's
  // 419 unexpected interruptions in 54 days on 16,384 GPUs imply 16384·54·24/419 ≈ 50,700 h.
  const gpuMtbfHours = 50_000;
  const checkpointSeconds = 60;
  const r = plan({
    model: { params: N }, tokens: D, cluster: { gpu: 'h100-sxm', count: gpus }, mfu: 0.4, zeroStage: 3,
    checkpointSeconds, storageBandwidth: 1e12, reliability: { gpuMtbfHours },
  });

  it('needs 16 bytes of state per parameter: 16 TB, about 200 H100s just to hold it', () => {
    // ZeRO paper, mixed-precision Adam: 2 (fp16 weights) + 2 (fp16 grads) + 4+4+4 (fp32 copy, m, v).
    const bytesPerParam = 2 + 2 + 4 + 4 + 4;
    expect(bytesPerParam).toBe(16);
    expect(r.stateBytes).toBe(16e12);
    expect(r.minGpusForState).toBeGreaterThanOrEqual(190);
    expect(r.minGpusForState).toBeLessThanOrEqual(210);
    expect(r.minGpusForState).toBe(Math.ceil((N * bytesPerParam) / H100_HBM));
    // ZeRO-3 over 100k GPUs: 160 MB of state each.
    expect(r.best.memory.weights + r.best.memory.grads + r.best.memory.optimizer).toBeCloseTo((N * 16) / gpus, 0);
  });

  it('C = 6ND = 9e25 FLOPs', () => {
    expect(r.totalFlops).toBe(6 * 1e12 * 15e12);
    expect(r.totalFlops / 9e25).toBeCloseTo(1, 12);
  });

  it('about 5.8e11 tokens/day and about 26 days for 15T tokens', () => {
    const flopsPerSecond = gpus * H100_PEAK * 0.4; // 3.96e19
    const tokensPerDay = (flopsPerSecond / (6 * N)) * 86400;
    expect(r.tokensPerDay / tokensPerDay).toBeCloseTo(1, 9);
    expect(Math.abs(r.tokensPerDay - 5.8e11) / 5.8e11).toBeLessThan(0.05);
    expect(r.days).toBeGreaterThan(25);
    expect(r.days).toBeLessThan(27.5);
    expect(r.days).toBeCloseTo(D / tokensPerDay, 9);
  });

  it('a fleet failure about every 30 min, Young/Daly interval for a 60 s checkpoint', () => {
    expect(r.reliability.fleetMtbfSeconds).toBeCloseTo((gpuMtbfHours * 3600) / gpus, 6); // 1800 s
    expect(r.reliability.failuresPerDay).toBeCloseTo(48, 6);
    // Young 1974: sqrt(2·C·M) = sqrt(2·60·1800) = 464.8 s ≈ 7.7 min.
    expect(r.reliability.youngIntervalSeconds).toBeCloseTo(Math.sqrt(2 * 60 * 1800), 6);
    expect(r.reliability.youngIntervalSeconds / 60).toBeCloseTo(7.75, 1);
    // Daly 2006 eq. 37, worked out by hand: 464.76·(1 + sqrt(60/3600)/3 + 60/32400) − 60.
    expect(r.reliability.dalyIntervalSeconds).toBeCloseTo(464.758 * (1 + 0.129099 / 3 + 0.0018519) - 60, 1);
    // The checkpoint holds weights and optimizer state: 14 bytes/param at 1 TB/s.
    expect(r.checkpoint.bytes).toBe(14e12);
    expect(r.checkpoint.writeSeconds).toBeCloseTo(14, 9);
  });

  it('the default per-GPU MTBF (from Llama 3) also gives about 30 min', () => {
    const d = plan({ model: { params: N }, tokens: D, cluster: { count: gpus }, mfu: 0.4 });
    const minutes = d.reliability.fleetMtbfSeconds / 60;
    expect(minutes).toBeCloseTo(((16384 * 54 * 24) / 419 / gpus) * 60, 6);
    expect(minutes).toBeGreaterThan(27);
    expect(minutes).toBeLessThan(33);
  });

  it('per-component MTBFs add as rates', () => {
    const c = plan({ model: { params: N }, tokens: D, cluster: { count: 1024 }, mfu: 0.4,
      reliability: { components: [{ name: 'gpu', count: 1024, mtbfHours: 50_000 }, { name: 'switch', count: 32, mtbfHours: 10_000 }] } });
    expect(c.reliability.fleetMtbfSeconds).toBeCloseTo(3600 / (1024 / 50_000 + 32 / 10_000), 6);
  });
});

describe('shape, activations, communication and step time', () => {
  it('GPT-3 shape gives about 175B parameters (12·L·h² + V·h)', () => {
    const r = plan({ model: { layers: 96, hidden: 12288, vocab: 50257 }, tokens: 300e9, cluster: { count: 1024 }, mfu: 0.4 });
    expect(r.paramsSource).toBe('12*L*h^2 + V*h');
    expect(Math.abs(r.params - 175e9) / 175e9).toBeLessThan(0.01);
  });

  it('activations per Korthikanti et al. 2022, bubble (p−1)/(m+p−1), tp and dp volumes', () => {
    const [s, h, a, L, t, p, m, d] = [2048, 12288, 96, 96, 8, 8, 16, 16];
    const base = {
      model: { layers: L, hidden: h, heads: a, seq: s, vocab: 50257 }, tokens: 300e9, cluster: { count: t * p * d },
      layout: { dp: d, tp: t, pp: p, microBatches: m }, zeroStage: 1 as const,
    };
    const r = plan(base);
    // 1F1B: the first stage holds p micro-batches of L/p layers: L layers of s·b·h·(34+5as/h)/t.
    expect(r.best.memory.activations).toBeCloseTo(L * (s * h * (34 + (5 * a * s) / h)) / t, -3);
    const full = plan({ ...base, recompute: 'full' });
    expect(full.best.memory.activations).toBeCloseTo((L * 2 * s * h) / t, -3);
    const noSp = plan({ ...base, sequenceParallel: false });
    expect(noSp.best.memory.activations).toBeCloseTo(L * s * h * (10 + 24 / t + (5 * a * s) / (h * t)), -3);
    expect(r.best.bubble).toBeCloseTo((p - 1) / (m + p - 1), 12);
    // tp: 4 ring all-reduces of s·b·h bf16 per layer per micro-batch, 2(t−1)/t each.
    expect(r.best.comm.tp.bytes).toBeCloseTo((L / p) * m * 4 * ((2 * (t - 1)) / t) * s * h * 2, -3);
    expect(r.best.comm.tp.seconds).toBeCloseTo(r.best.comm.tp.bytes / 450e9, 9);
    // dp across nodes on InfiniBand: 2(d−1)/d of the stage's bf16 gradients at 50 GB/s.
    expect(r.best.comm.dp.tier).toBe('ib');
    expect(r.best.comm.dp.bytes).toBeCloseTo(((2 * (d - 1)) / d) * (r.params / (t * p)) * 2, -3);
    expect(r.best.comm.pp.tier).toBe('ib');
    // State per GPU with ZeRO-1: 2 + 2 + 12/d bytes per parameter of the GPU's slice.
    const slice = r.params / (t * p);
    expect(r.best.memory.weights + r.best.memory.grads + r.best.memory.optimizer).toBeCloseTo(slice * (4 + 12 / d), -3);
    // Step time at least the compute time at 60 % of peak, inflated by the bubble.
    const compute = (6 * r.params * d * m * s) / (t * p * d * H100_PEAK * 0.6);
    expect(r.best.stepSeconds!).toBeGreaterThanOrEqual(compute / (1 - (p - 1) / (m + p - 1)));
    expect(r.best.mfu!).toBeCloseTo((6 * r.params * d * m * s) / (r.best.stepSeconds! * t * p * d * H100_PEAK), 9);
  });

  it('searches layouts that fit, fastest first', () => {
    const r = plan({ model: { layers: 80, hidden: 8192, heads: 64, seq: 4096, vocab: 128256 }, tokens: 15e12, cluster: { count: 2048 } });
    const all = [r.best, ...r.alternatives];
    expect(all.length).toBeGreaterThan(1);
    for (const e of all) {
      expect(e.memory.fits).toBe(true);
      expect(e.memory.total).toBeLessThanOrEqual(H100_HBM);
      expect(e.layout.dp * e.layout.tp * e.layout.pp).toBe(2048);
    }
    const rate = (e: typeof r.best) => e.tokensPerStep! / e.stepSeconds!;
    for (const e of r.alternatives) expect(rate(e)).toBeLessThanOrEqual(rate(r.best));
  });

  it('bad input is ERR_INVALID_ARGUMENT naming the field', () => {
    const bad = (input: unknown, match: RegExp) => {
      try { plan(input as never); } catch (err) {
        expect(isNcclNodeError(err, 'ERR_INVALID_ARGUMENT')).toBe(true);
        expect((err as Error).message).toMatch(match);
        return;
      }
      throw new Error('expected an error');
    };
    bad({ model: { params: -1 }, tokens: 1, cluster: { count: 8 }, mfu: 0.4 }, /model\.params/);
    bad({ model: { layers: 2 }, tokens: 1, cluster: { count: 8 }, mfu: 0.4 }, /params, or layers \+ hidden \+ vocab/);
    bad({ model: { params: 1e9 }, tokens: 1, cluster: { gpu: 'a100', count: 8 }, mfu: 0.4 }, /cluster\.gpu/);
    bad({ model: { params: 1e9 }, tokens: 1, cluster: { count: 8 }, mfu: 1.5 }, /mfu/);
    bad({ model: { params: 1e9 }, tokens: 1, cluster: { count: 8 }, zeroStage: 4, mfu: 0.4 }, /zeroStage/);
    bad({ model: { params: 1e9, seq: 8 }, tokens: 1, cluster: { count: 8 }, layout: { dp: 2, tp: 2 } }, /dp·tp·pp = cluster\.count \(8\)/);
    bad({ model: { params: 1e9 }, tokens: 1, cluster: { count: 8 } }, /expected mfu/);
    bad({ model: { layers: 80, hidden: 8192, heads: 64, seq: 4096, vocab: 128256 }, tokens: 1, cluster: { count: 8 } }, /no layout/);
  });
});

describe('nccl-node plan', () => {
  it('--json prints the API result; bad flags exit 2 with the error code', () => {
    const out = execFileSync('node', ['bin/nccl-node.js', 'plan', '--params', '1e12', '--tokens', '15e12', '--gpus', '100000', '--mfu', '0.4', '--json'], { encoding: 'utf8' });
    const j = JSON.parse(out) as { totalFlops: number; minGpusForState: number; days: number };
    expect(j.totalFlops).toBe(9e25);
    expect(j.minGpusForState).toBe(200);
    expect(j.days).toBeCloseTo(15e12 / ((100_000 * H100_PEAK * 0.4) / 6e12 * 86400), 6);
    const table = execFileSync('node', ['bin/nccl-node.js', 'plan', '--params', '1e12', '--tokens', '15e12', '--gpus', '100000', '--mfu', '0.4'], { encoding: 'utf8' });
    expect(table).toMatch(/days to train\s+26\.3/);
    const bad = spawnSync('node', ['bin/nccl-node.js', 'plan', '--params', 'x', '--tokens', '1', '--gpus', '8', '--mfu', '0.4'], { encoding: 'utf8' });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/ERR_INVALID_ARGUMENT.*model\.params/);
  }, 60_000);
});
