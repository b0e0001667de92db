/**
 * 3D parallelism against one process: train3d at (dp, tp, pp) = (2,2,1), (1,2,2),
 * (2,1,2), (1,1,4) and (4,1,1) on 4 Gloo ranks trains the GPT with AdamW and global
 * gradient clipping; every step's loss and gradient norm, and the final parameters
 * reassembled from every rank's shard by the test, match a single process training
 * the whole global batch with the test's own AdamW and clipping.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { load } from '../../src/checkpoint/index.js';
import { describeRanks, runRanks } from '../helpers/ranks.js';
import { assemble, BATCH, batchesFor, CFG, CLIP, expectNear, LR, MICRO, reference as referenceOf, WD, type Out } from './train3d-reference.js';

const STEPS = 3;
const batches = batchesFor(STEPS);
const reference = () => referenceOf(batches);

/** Trains 2 steps at a layout saving at step 2; the checkpoint, read back whole here, holds the run's final parameters bit for bit. */
async function saveAndReadBack(dir: string, payload: Record<string, unknown>, like: Map<string, Float32Array>): Promise<void> {
  const first = await runRanks<Out>('test/models/train3d-worker.ts', 4, { payload: { ...payload, steps: 2, ckpt: { dir, at: [2] } } });
  expect(first.every((x) => x.code === 0), describeRanks(first)).toBe(true);
  const saved = assemble(first as never, like);
  const targets = Object.fromEntries([...saved].map(([k, v]) => [k, { data: new Float32Array(v.length), offset: 0 }]));
  expect((await load(dir, targets)).step).toBe(2);
  for (const [k, v] of saved) expect(Buffer.from(targets[k]!.data.buffer).equals(Buffer.from(v.buffer)), k).toBe(true);
}

describe('train3d: data x tensor x pipeline parallel', { timeout: 120_000 }, () => {
  const layouts = [[2, 2, 1, 0], [1, 2, 2, 0], [2, 1, 2, 0], [1, 1, 4, 0], [4, 1, 1, 0], [2, 1, 2, 2], [2, 2, 1, 1], [4, 1, 1, 2],
    [2, 2, 1, 3], [2, 1, 2, 3], [4, 1, 1, 3], [2, 2, 1, 0, 'sequence parallel'], [1, 2, 2, 1, 'sequence parallel, recompute'], [2, 1, 2, 2, 'zb-h1'], [1, 2, 2, 0, 'zb-h1']] as const;
  for (const [dp, tp, pp, zero, extra] of layouts) {
    it(`(dp, tp, pp) = (${dp}, ${tp}, ${pp})${zero ? ` with ZeRO-${zero} on dp` : ''}${extra ? `, ${extra}` : ''} equals one process`, async () => {
      const ref = await reference();
      const ranks = await runRanks<Out>('test/models/train3d-worker.ts', 4, {
        payload: { model: CFG, mesh: { dp, tp, pp }, zero, sequenceParallel: extra?.includes('sequence') ?? false, recompute: extra?.includes('recompute') ?? false, steps: STEPS, globalBatch: BATCH, micro: MICRO, schedule: extra?.includes('zb-h1') ? 'zb-h1' : '1f1b', optimizer: { kind: 'adamw', lr: LR, weightDecay: WD }, clipNorm: CLIP, batches },
      });
      expect(ranks.every((x) => x.code === 0), describeRanks(ranks)).toBe(true);
      for (const x of ranks) {
        // Held between steps, against ZeRO's accounting of this rank's n parameter elements (shards padded to a
        // multiple of dp): parameters n (ZeRO-3: n/dp), gradients n (ZeRO-2/3: none, dropped after the reduce),
        // AdamW's two moments 2n (ZeRO-1/2/3: 2n/dp).
        const n = x.result!.params.reduce((a, p) => a + p.size, 0), shard = Math.ceil(n / dp);
        expect(x.result!.resident).toBe(zero === 3 ? shard : n);
        expect(x.result!.memory).toMatchObject({ params: zero === 3 ? shard : n, grads: zero >= 2 ? 0 : n, optimizer: zero ? 2 * shard : 2 * n });
        // The model object holds only this rank's stage (nothing of it between steps under ZeRO-3).
        expect(x.result!.memory.modelParams).toBe(zero === 3 ? 0 : n);
        expect(x.result!.memory.activationsPeak).toBeGreaterThan(0);
        for (let s = 0; s < STEPS; s++) {
          expect(x.result!.losses[s]).toBeCloseTo(ref.losses[s]!, 5);
          expect(x.result!.norms[s]! / ref.norms[s]!).toBeCloseTo(1, 4);
        }
      }
      const got = assemble(ranks as never, ref.data);
      expect(ref.norms[0]).toBeGreaterThan(CLIP); // clipping was active
      expectNear(got, ref.data);
    });
  }

  const moves = [
    { saved: { mesh: { dp: 2, tp: 2, pp: 1 }, zero: 2 }, resumed: [[{ dp: 2, tp: 1, pp: 2 }, 3], [{ dp: 1, tp: 2, pp: 2 }, 1], [{ dp: 1, tp: 1, pp: 4 }, 0]] },
    { saved: { mesh: { dp: 4, tp: 1, pp: 1 }, zero: 3 }, resumed: [[{ dp: 1, tp: 1, pp: 4 }, 0]] },
  ] as const;
  for (const { saved, resumed } of moves) {
    const at = (m: { dp: number; tp: number; pp: number }, zero: number) => `(${m.dp}, ${m.tp}, ${m.pp})${zero ? ` with ZeRO-${zero}` : ''}`;
    it(`a checkpoint saved at ${at(saved.mesh, saved.zero)} holds the exact global tensors and resumes at ${resumed.map(([m, z]) => at(m, z)).join(', ')}`, async () => {
      const ref = await reference();
      const dir = mkdtempSync(join(tmpdir(), 'nccl-node-3d-'));
      try {
        const common = { model: CFG, globalBatch: BATCH, micro: MICRO, schedule: '1f1b', optimizer: { kind: 'adamw', lr: LR, weightDecay: WD }, clipNorm: CLIP, batches };
        await saveAndReadBack(dir, { ...common, ...saved }, ref.data);
        for (const [mesh, zero] of resumed) {
          const ranks = await runRanks<Out>('test/models/train3d-worker.ts', 4, { payload: { ...common, mesh, zero, steps: STEPS, ckpt: { from: dir } } });
          expect(ranks.every((x) => x.code === 0), describeRanks(ranks)).toBe(true);
          for (const x of ranks) expect(x.result!.losses[0]).toBeCloseTo(ref.losses[2]!, 5);
          expectNear(assemble(ranks as never, ref.data), ref.data);
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });
  }
});
