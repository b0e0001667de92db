/**
 * train3d with hybrid sharding on the dp axis (hsdp: { replicate }) on 4 Gloo ranks:
 * dp 4 as 2 replicas of 2-rank shard groups, and dp 2 as 2 replicas of one rank
 * beside pp 2 or tp 2. Over 5 steps every loss, gradient norm and the final
 * parameters match the single-process reference of train3d.test.ts (the whole
 * global batch in one GPT, AdamW, global clipping); each rank's resident state is
 * ZeRO's accounting over the shard group (1/(dp / replicate), not 1/dp); a
 * checkpoint written under HSDP holds the reference's global tensors bit for bit
 * and resumes at other layouts as the reference; a replicate that does not divide
 * dp is refused naming both.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { load } from '../../src/checkpoint/index.js';
import { describeRanks, runRanks } from '../helpers/ranks.js';
import { assemble, BATCH, batchesFor, CFG, CLIP, expectNear, LR, MICRO, reference, WD, type Out } from './train3d-reference.js';

const STEPS = 5;
const batches = batchesFor(STEPS);
const ref = reference(batches);
const WORKER = 'test/models/train3d-worker.ts';
const common = { model: CFG, globalBatch: BATCH, micro: MICRO, schedule: '1f1b', optimizer: { kind: 'adamw', lr: LR, weightDecay: WD }, clipNorm: CLIP, batches };
type Mesh = { dp: number; tp: number; pp: number };
type HsdpOut = Out & { coords: { dp: number; replicate: number; tp: number; pp: number } };

async function train(layout: { mesh: Mesh; zero: number; replicate?: number }, extra: Record<string, unknown> = {}) {
  const { mesh, zero, replicate } = layout;
  const ranks = await runRanks<HsdpOut>(WORKER, 4, {
    timeoutMs: 60_000,
    payload: { ...common, mesh, zero, ...(replicate ? { hsdp: { replicate } } : {}), steps: STEPS, ...extra },
  });
  expect(ranks.every((x) => x.code === 0), describeRanks(ranks)).toBe(true);
  return ranks;
}

describe('train3d: HSDP on the dp axis', { timeout: 60_000 }, () => {
  const layouts: Array<{ mesh: Mesh; replicate: number; zero: number }> = [
    { mesh: { dp: 4, tp: 1, pp: 1 }, replicate: 2, zero: 3 },
    { mesh: { dp: 4, tp: 1, pp: 1 }, replicate: 2, zero: 1 },
    { mesh: { dp: 2, tp: 1, pp: 2 }, replicate: 2, zero: 3 },
    { mesh: { dp: 2, tp: 2, pp: 1 }, replicate: 2, zero: 0 },
  ];
  for (const { mesh, replicate, zero } of layouts) {
    const shardRanks = mesh.dp / replicate;
    it(`dp ${mesh.dp} = replicate ${replicate} x shard ${shardRanks} (tp ${mesh.tp}, pp ${mesh.pp}) with ZeRO-${zero} equals one process`, async () => {
      const want = await ref;
      const ranks = await train({ mesh, zero, replicate });
      for (const x of ranks) {
        const r = x.result!;
        // The shard group is DeviceMesh's dp, its replicas DeviceMesh's replicate.
        expect(r.coords.dp).toBeLessThan(shardRanks);
        expect(r.coords.replicate).toBeLessThan(replicate);
        // ZeRO over the shard group: this rank's n parameter elements padded to a multiple of dp / replicate.
        const n = r.params.reduce((a, p) => a + p.size, 0), shard = Math.ceil(n / shardRanks);
        expect(r.resident).toBe(zero === 3 ? shard : n);
        expect(r.memory).toMatchObject({ params: zero === 3 ? shard : n, grads: zero >= 2 ? 0 : n, optimizer: zero ? 2 * shard : 2 * n });
        for (let s = 0; s < STEPS; s++) {
          expect(r.losses[s]).toBeCloseTo(want.losses[s]!, 5);
          expect(r.norms[s]! / want.norms[s]!).toBeCloseTo(1, 4);
        }
      }
      // Every (dp, replicate) pair occurs once: the replicas train different rows.
      const pairs = new Set(ranks.map((x) => `${x.result!.coords.dp},${x.result!.coords.replicate},${x.result!.coords.tp},${x.result!.coords.pp}`));
      expect(pairs.size).toBe(4);
      expect(want.norms[0]).toBeGreaterThan(CLIP); // clipping was active
      expectNear(assemble(ranks as never, want.data), want.data);
    });
  }

  it('a checkpoint saved under HSDP (replicate 2 x shard 2, ZeRO-3) holds the global tensors and resumes at (1, 2, 2) and at replicate 2 x shard 1 with pp 2', async () => {
    const want = await ref;
    const dir = mkdtempSync(join(tmpdir(), 'nccl-node-3d-hsdp-'));
    try {
      const first = await train({ mesh: { dp: 4, tp: 1, pp: 1 }, zero: 3, replicate: 2 }, { steps: 2, ckpt: { dir, at: [2] } });
      const saved = assemble(first as never, want.data);
      const targets = Object.fromEntries([...saved].map(([k, v]) => [k, { data: new Float32Array(v.length), offset: 0 }]));
      expect((await load(dir, targets)).step).toBe(2);
      for (const [k, v] of saved) expect(Buffer.from(targets[k]!.data.buffer).equals(Buffer.from(v.buffer)), k).toBe(true);
      for (const layout of [{ mesh: { dp: 1, tp: 2, pp: 2 }, zero: 0 }, { mesh: { dp: 2, tp: 1, pp: 2 }, zero: 2, replicate: 2 }]) {
        const ranks = await train(layout, { ckpt: { from: dir } });
        for (const x of ranks) for (let s = 2; s < STEPS; s++) expect(x.result!.losses[s - 2]).toBeCloseTo(want.losses[s]!, 5);
        expectNear(assemble(ranks as never, want.data), want.data);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a replicate that does not divide dp, naming both', async () => {
    // The check precedes any collective, so one rank shows it (with more, a rank leaving first can take the store down under the others' init).
    const ranks = await runRanks(WORKER, 1, { timeoutMs: 30_000, payload: { ...common, mesh: { dp: 4, tp: 1, pp: 1 }, hsdp: { replicate: 3 }, steps: 1 } });
    for (const x of ranks) {
      expect(x.code).not.toBe(0);
      expect(x.stderr).toContain('NcclNodeError: train3d: hsdp replicate 3 must be a positive integer dividing dp 4');
      expect(x.stderr).toContain("code: 'ERR_INVALID_ARGUMENT'");
    }
  });
});
