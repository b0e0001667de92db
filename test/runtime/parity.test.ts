/**
 * DDP and ZeRO-1/2/3 at 2 and 4 ranks end with the same parameters as one
 * process training on the same global batch, to float32 rounding. The test
 * model's sizes are odd (vocab 257, dim 190, hidden 767), so units do not
 * divide by the world size and shards are padded.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { shardLayout } from '../../src/runtime/fsdp.js';
import { TinyLM, TEST_CONFIG } from '../../src/models/tiny-lm/tiny-lm.js';
import { concat, maxRelDiff } from './helpers.js';
import { baseConfig, DDP, runAll, type RunOut } from './cases.js';
import { referenceTrain } from './reference.js';

// Adam turns float32 summation-order differences into differences of at most a
// few lr-sized steps on near-zero gradients; observed ~2e-5, bound 1e-4.
const FP32_TOL = 1e-4;
const KINDS = [DDP, { kind: 'fsdp', stage: 1 }, { kind: 'fsdp', stage: 2 }, { kind: 'fsdp', stage: 3 }] as const;
const NAMES = ['DDP', 'ZeRO-1', 'ZeRO-2', 'ZeRO-3'];

let ref: { losses: number[]; params: Float32Array };

beforeAll(async () => {
  const r = await referenceTrain(baseConfig());
  ref = { losses: r.losses, params: concat(r.params) };
}, 60_000);

it('pads: some test units do not divide by 2 or 4', () => {
  const sizes = new TinyLM(TEST_CONFIG).units.map((u) => u.reduce((a, p) => a + p.size, 0));
  expect(sizes.some((n) => shardLayout(n, 2).padded !== n)).toBe(true);
  expect(sizes.some((n) => shardLayout(n, 4).padded !== n)).toBe(true);
});

for (const world of [2, 4]) {
  describe(`${world} ranks`, () => {
    let runs: RunOut[];
    beforeAll(async () => {
      runs = await runAll(world, KINDS.map((parallel) => baseConfig({ parallel })), 150_000);
    }, 160_000);

    KINDS.forEach((_, i) => {
      it(`${NAMES[i]} matches the single-process reference`, () => {
        const r = runs[i]!;
        expect(maxRelDiff(r.params, ref.params)).toBeLessThan(FP32_TOL);
        r.losses.forEach((l, s) => expect(l).toBeCloseTo(ref.losses[s]!, 4));
      }, 5_000);
    });

    it('ZeRO stages shrink per-rank gradient and optimizer memory as the stage rises', () => {
      const [ddp, z1, z2, z3] = runs.map((r) => r.memory);
      expect(z1!.optimizer).toBeLessThan(ddp!.optimizer / (world - 0.5));
      expect(z2!.grads).toBeLessThan(z1!.grads);
      expect(z3!.params).toBeLessThan(z2!.params);
    }, 5_000);
  });
}
