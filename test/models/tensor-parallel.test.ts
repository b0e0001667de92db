/**
 * Megatron-style tensor parallelism against one process: a GPT split over a TP
 * group of 2 and 4 ranks (Gloo) trains SGD steps on the same batches as the full
 * GPT in one process; every step's loss, the last gradients and the final
 * parameters, reassembled from the ranks' shards by the test's own code, match
 * the single-process run to float32 rounding. The same with sequence parallelism,
 * where the replicated parameters' gradients must also agree on every rank.
 */
import { describe, expect, it } from 'vitest';
import { GPT, type GPTConfig } from '../../src/models/gpt/gpt.js';
import { mulberry32 } from '../../src/util/prng.js';
import { describeRanks, runRanks } from '../helpers/ranks.js';

const CFG: GPTConfig = { vocab: 16, dim: 16, heads: 4, layers: 2, seqLen: 6, hidden: 32, seed: 5 };
const BATCH = 4, STEPS = 3, LR = 0.5; // 24 token rows: sequence parallelism splits them over 2 or 4 ranks

interface Placed { name: string; size: number; shard: { shape: number[]; dim: number; parts: number; index: number; groups: number } | null }

/** The test's own inverse of the sharding: writes a local block back into the full row-major tensor. */
function place(full: Float32Array, local: Float32Array, s: NonNullable<Placed['shard']>): void {
  const [rows, cols] = s.shape.length === 2 ? [s.shape[0]!, s.shape[1]!] : [1, s.shape[0]!];
  if (s.shape.length === 2 && s.dim === 0) {
    full.set(local, (s.index * rows / s.parts) * cols);
    return;
  }
  const piece = cols / s.groups / s.parts;
  let k = 0;
  for (let r = 0; r < rows; r++) {
    for (let g = 0; g < s.groups; g++) {
      for (let j = 0; j < piece; j++) full[r * cols + g * (cols / s.groups) + s.index * piece + j] = local[k++]!;
    }
  }
}

describe('tensor-parallel GPT', { timeout: 120_000 }, () => {
  const r = mulberry32(3);
  // One batch, seen every step: the loss must fall, which shows the steps learn.
  const one = Array.from({ length: BATCH * (CFG.seqLen + 1) }, () => Math.floor(r() * CFG.vocab));
  const batches = Array.from({ length: STEPS }, () => one);

  async function reference(): Promise<{ losses: number[]; grads: Map<string, Float32Array>; data: Map<string, Float32Array> }> {
    const m = new GPT(CFG);
    const losses: number[] = [];
    for (const b of batches) {
      for (const p of m.params) p.grad.fill(0);
      losses.push(await m.forwardBackward(Int32Array.from(b), BATCH, { gradScale: 1 / (BATCH * CFG.seqLen) }));
      for (const p of m.params) for (let i = 0; i < p.size; i++) p.data[i] = p.data[i]! - LR * p.grad[i]!;
    }
    return { losses, grads: new Map(m.params.map((p) => [p.name, p.grad])), data: new Map(m.params.map((p) => [p.name, p.data])) };
  }

  for (const [tp, sp] of [[2, false], [4, false], [2, true], [4, true]] as const) {
    it(`TP ${tp}${sp ? ' with sequence parallelism' : ''} equals one process (loss, gradients, parameters after ${STEPS} SGD steps)`, async () => {
      const ref = await reference();
      const ranks = await runRanks<{ losses: number[]; params: Placed[] }>('test/models/tp-worker.ts', tp, { payload: { cfg: CFG, batches, batch: BATCH, lr: LR, sp } });
      expect(ranks.every((x) => x.code === 0), describeRanks(ranks)).toBe(true);
      const grads = new Map([...ref.grads].map(([k, v]) => [k, new Float32Array(v.length).fill(NaN)]));
      const data = new Map([...ref.data].map(([k, v]) => [k, new Float32Array(v.length).fill(NaN)]));
      for (const x of ranks) {
        for (const [s, l] of x.result!.losses.entries()) expect(l).toBeCloseTo(ref.losses[s]!, 5);
        let o = 0;
        for (const p of x.result!.params) {
          const g = x.arrays!.subarray(o, o + p.size), d = x.arrays!.subarray(o + p.size, o + 2 * p.size);
          o += 2 * p.size;
          if (p.shard) {
            place(grads.get(p.name)!, g, p.shard);
            place(data.get(p.name)!, d, p.shard);
          } else if (x.rank === 0) {
            grads.get(p.name)!.set(g);
            data.get(p.name)!.set(d);
          } else {
            // Replicated: every rank holds the same gradient (under sequence parallelism only after finishGrads).
            const want = ref.grads.get(p.name)!, scale = Math.max(...want.map(Math.abs));
            for (let i = 0; i < g.length; i++) expect(Math.abs(g[i]! - want[i]!), `${p.name}[${i}] grad on rank ${x.rank}`).toBeLessThanOrEqual(1e-4 * scale + 1e-7);
          }
        }
      }
      for (const [name, want] of ref.grads) {
        const got = grads.get(name)!;
        const scale = Math.max(...want.map(Math.abs));
        for (let i = 0; i < want.length; i++) expect(Math.abs(got[i]! - want[i]!), `${name}[${i}] grad`).toBeLessThanOrEqual(1e-4 * scale + 1e-7);
      }
      for (const [name, want] of ref.data) {
        const got = data.get(name)!;
        for (let i = 0; i < want.length; i++) expect(Math.abs(got[i]! - want[i]!), `${name}[${i}]`).toBeLessThanOrEqual(1e-5 * Math.max(1, Math.abs(want[i]!)));
      }
      expect(ref.losses[STEPS - 1]).toBeLessThan(ref.losses[0]!);
    });
  }
});
