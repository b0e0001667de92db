/**
 * At 2 ranks: gradient accumulation, 16-bit compressed reduction, global
 * gradient clipping and bf16 mixed precision, each against the single-process
 * float32 reference.
 */
import { beforeAll, expect, it } from 'vitest';
import { concat, maxRelDiff } from './helpers.js';
import { baseConfig, DDP, runAll, type RunOut } from './cases.js';
import { referenceTrain } from './reference.js';

const CLIP = 0.05; // below the test model's gradient norm (~0.3-1), so clipping is active
const runs = {
  accumDDP: baseConfig({ microBatches: 2 }),
  accumZ2: baseConfig({ microBatches: 2, parallel: { kind: 'fsdp', stage: 2 } }),
  accumZ3: baseConfig({ microBatches: 2, parallel: { kind: 'fsdp', stage: 3 } }),
  bf16DDP: baseConfig({ parallel: { ...DDP, compression: 'bfloat16' } }),
  fp16DDP: baseConfig({ parallel: { ...DDP, compression: 'float16' } }),
  clipDDP: baseConfig({ clipNorm: CLIP }),
  clipZ3: baseConfig({ clipNorm: CLIP, parallel: { kind: 'fsdp', stage: 3 } }),
  mpZ3: baseConfig({ parallel: { kind: 'fsdp', stage: 3, paramDtype: 'bfloat16' } }),
  mpZ2f32: baseConfig({ parallel: { kind: 'fsdp', stage: 2, paramDtype: 'bfloat16', reduceDtype: 'float32' } }),
};
type Name = keyof typeof runs;
let out: Record<Name, RunOut>;
let ref: { losses: number[]; params: Float32Array };
let refClip: { losses: number[]; params: Float32Array; norms: number[] };

beforeAll(async () => {
  const names = Object.keys(runs) as Name[];
  const res = await runAll(2, names.map((n) => runs[n]), 170_000);
  out = Object.fromEntries(names.map((n, i) => [n, res[i]!])) as Record<Name, RunOut>;
  const r = await referenceTrain(baseConfig());
  ref = { losses: r.losses, params: concat(r.params) };
  const c = await referenceTrain(baseConfig({ clipNorm: CLIP }));
  refClip = { losses: c.losses, params: concat(c.params), norms: c.norms };
}, 200_000);

it('accumulates micro-batches without communication and matches the full batch (DDP, ZeRO-2, ZeRO-3)', () => {
  for (const n of ['accumDDP', 'accumZ2', 'accumZ3'] as const) expect(maxRelDiff(out[n].params, ref.params), n).toBeLessThan(1e-4);
}, 5_000);

it('bf16 / fp16 compressed all-reduce stays within 16-bit error of float32, and is not float32', () => {
  for (const [n, tol] of [['bf16DDP', 2e-2], ['fp16DDP', 5e-3]] as const) {
    const d = maxRelDiff(out[n].params, ref.params);
    expect(d, n).toBeLessThan(tol);
    expect(d, n).toBeGreaterThan(1e-6);
  }
}, 5_000);

it('clips by the global norm across shards (DDP and ZeRO-3 agree with the reference norm)', () => {
  for (const n of ['clipDDP', 'clipZ3'] as const) {
    out[n].gradNorms.forEach((g, s) => expect(g! / refClip.norms[s]!, n).toBeCloseTo(1, 4));
    expect(maxRelDiff(out[n].params, refClip.params), n).toBeLessThan(1e-4);
  }
  expect(refClip.norms[0]!).toBeGreaterThan(CLIP);
}, 5_000);

it('bf16 mixed precision tracks the float32 reference within bf16 error', () => {
  for (const n of ['mpZ3', 'mpZ2f32'] as const) {
    const d = maxRelDiff(out[n].params, ref.params);
    expect(d, n).toBeLessThan(2e-2);
    expect(d, n).toBeGreaterThan(1e-6);
    out[n].losses.forEach((l, s) => expect(Math.abs(l - ref.losses[s]!) / ref.losses[s]!, n).toBeLessThan(1e-2));
  }
}, 5_000);
