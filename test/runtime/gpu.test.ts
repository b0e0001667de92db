/**
 * The runtime's GPU path: DDP and ZeRO-2/3 with parameters and gradients in
 * DeviceBuffers, collectives through init({backend: 'nccl'}) on the stand-in
 * libcuda/libnccl (test/gpu/helpers.ts; real GPUs run the same code). Each run
 * must match the single-process float32 reference as the host parity tests do:
 * fp32 reductions to float32 rounding, bf16 ones within bf16 error.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { standinEnv } from '../gpu/helpers.js';
import { runRanks } from '../helpers/ranks.js';
import { concat, maxRelDiff } from './helpers.js';
import { baseConfig, DDP, runAll, type RunOut } from './cases.js';
import { referenceTrain } from './reference.js';
import type { TrainConfig } from '../../src/train/loop.js';

const WORKER = fileURLToPath(new URL('./gpu-worker.ts', import.meta.url));
const FP32_TOL = 1e-4; // as parity.test.ts
const CLIP = 0.05; // as features.test.ts: below the gradient norm, so clipping is active

/** [name, config, tolerance against the reference, clipped reference?] */
const CASES: [string, TrainConfig, number, boolean][] = [
  ['DDP', baseConfig(), FP32_TOL, false],
  ['ZeRO-1', baseConfig({ parallel: { kind: 'fsdp', stage: 1 } }), FP32_TOL, false],
  ['ZeRO-2', baseConfig({ parallel: { kind: 'fsdp', stage: 2 } }), FP32_TOL, false],
  ['ZeRO-3', baseConfig({ parallel: { kind: 'fsdp', stage: 3 } }), FP32_TOL, false],
  ['ZeRO-3 bf16 params + bf16 reduce', baseConfig({ parallel: { kind: 'fsdp', stage: 3, paramDtype: 'bfloat16' } }), 2e-2, false],
  ['ZeRO-2 bf16 params + fp32 reduce', baseConfig({ parallel: { kind: 'fsdp', stage: 2, paramDtype: 'bfloat16', reduceDtype: 'float32' } }), 2e-2, false],
  ['DDP bf16 compression', baseConfig({ parallel: { ...DDP, compression: 'bfloat16' } }), 2e-2, false],
  ['DDP clip', baseConfig({ clipNorm: CLIP }), FP32_TOL, true],
  ['ZeRO-3 clip', baseConfig({ clipNorm: CLIP, parallel: { kind: 'fsdp', stage: 3 } }), FP32_TOL, true],
  ['ZeRO-2 accumulation', baseConfig({ microBatches: 2, parallel: { kind: 'fsdp', stage: 2 } }), FP32_TOL, false],
];

// The stand-in libcuda logs every device-to-host copy here (one file per rank process).
const DTOH_TRACE = join(mkdtempSync(join(tmpdir(), 'nccl-node-dtoh-')), 'trace');

async function runGpu(world: number, runs: TrainConfig[]): Promise<RunOut[]> {
  Object.assign(process.env, standinEnv(), { CUDA_STANDIN_DTOH_TRACE: DTOH_TRACE });
  const out = await runRanks<Omit<RunOut, 'params'>[]>(WORKER, world, { payload: { runs }, check: true, timeoutMs: 170_000 });
  const blob = out[0]!.arrays!;
  const per = blob.length / runs.length;
  return out[0]!.result!.map((r, i) => ({ ...r, params: blob.subarray(i * per, (i + 1) * per) }));
}

let ref: { losses: number[]; params: Float32Array };
let refClip: { losses: number[]; params: Float32Array; norms: number[] };
const byWorld = new Map<number, RunOut[]>();

beforeAll(async () => {
  const r = await referenceTrain(baseConfig());
  ref = { losses: r.losses, params: concat(r.params) };
  const c = await referenceTrain(baseConfig({ clipNorm: CLIP }));
  refClip = { losses: c.losses, params: concat(c.params), norms: c.norms };
}, 60_000);

for (const world of [2, 4]) {
  describe(`${world} ranks on NCCL (stand-ins), DeviceBuffers`, () => {
    // 4 ranks on 2 cores: the plain fp32 cases only, to bound the time (a global
    // batch of 4 has no 2 micro-batches per rank at 4 ranks anyway).
    const cases = world === 2 ? CASES : CASES.filter(([, cfg, tol, clip]) => tol === FP32_TOL && !clip && cfg.microBatches === 1);
    let runs: RunOut[];
    beforeAll(async () => {
      runs = await runGpu(world, cases.map(([, cfg]) => cfg));
      byWorld.set(world, runs);
    }, 180_000);

    cases.forEach(([name, , tol, clipped], i) => {
      it(`${name} matches the single-process reference`, () => {
        const r = runs[i]!;
        const want = clipped ? refClip : ref;
        const d = maxRelDiff(r.params, want.params);
        expect(d).toBeLessThan(tol);
        if (tol > FP32_TOL) expect(d).toBeGreaterThan(1e-6); // really reduced / stored in 16 bits
        r.losses.forEach((l, s) => expect(Math.abs(l - want.losses[s]!) / want.losses[s]!).toBeLessThan(tol === FP32_TOL ? 1e-5 : 1e-2));
        if (clipped) r.gradNorms.forEach((g, s) => expect(g! / refClip.norms[s]!).toBeCloseTo(1, 4));
        // Accumulation, clipping and the optimizer step stay on the GPU: nothing larger
        // than a scalar (a norm, 8 bytes) is copied to the host.
        expect(r.stepDtoHMax, 'device-to-host bytes in one copy during finish + clip + step').toBeLessThanOrEqual(8);
      }, 5_000);
    });
  });
}

// One DDP and one FSDP serve both storages, so their accounting cannot drift apart:
// the host run (Gloo, typed arrays) of the same configs reports the same bytes.
describe('the host and device storages report the same memory (2 ranks)', () => {
  // Cases whose transients follow the hook order alone (DDP's 16-bit copies and stage 3's
  // prefetched bf16 compute copies live as long as their collectives, a matter of timing).
  const names = ['ZeRO-1', 'ZeRO-2 accumulation', 'ZeRO-2 bf16 params + fp32 reduce', 'ZeRO-3'];
  it(`${names.join(', ')}: params, grads, optimizer state and peak transient bytes`, async () => {
    const picked = names.map((n) => CASES.findIndex(([name]) => name === n));
    const host = await runAll(2, picked.map((i) => CASES[i]![1]), 120_000);
    picked.forEach((i, j) => {
      const device = byWorld.get(2)![i]!.memory;
      expect(device, names[j]).toEqual(host[j]!.memory);
      if (names[j] !== 'ZeRO-1') expect(device.peakTransient, names[j]).toBeGreaterThan(0); // gathered units, unsharded gradients
    });
  }, 150_000);
});
