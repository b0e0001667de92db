/**
 * What the train3d tests share: the model and schedule, the batches, the
 * single-process reference (the whole global batch in one GPT, with the test's own
 * AdamW and global clipping), and the reassembly of every rank's shards.
 */
import { expect } from 'vitest';
import { GPT, type GPTConfig } from '../../src/models/gpt/gpt.js';
import { mulberry32 } from '../../src/util/prng.js';

export const CFG: GPTConfig = { vocab: 16, dim: 16, heads: 4, layers: 4, seqLen: 5, hidden: 32, seed: 21 };
export const BATCH = 8, MICRO = 2, LR = 1e-2, WD = 0.01, CLIP = 0.5;

/** The global batches of `steps` steps; the first k are the same for any steps >= k. */
export function batchesFor(steps: number): number[][] {
  const r = mulberry32(8);
  return Array.from({ length: steps }, () => Array.from({ length: BATCH * (CFG.seqLen + 1) }, () => Math.floor(r() * CFG.vocab)));
}

export type Shard = { shape: number[]; dim: number; parts: number; index: number; groups: number } | null;

export interface Out {
  losses: number[]; norms: number[]; resident: number;
  memory: { params: number; grads: number; optimizer: number; activationsPeak: number; modelParams: number };
  params: Array<{ name: string; size: number; shard: Shard }>;
}

function place(full: Float32Array, local: Float32Array, s: NonNullable<Shard>): void {
  const [rows, cols] = s.shape.length === 2 ? [s.shape[0]!, s.shape[1]!] : [1, s.shape[0]!];
  if (s.shape.length === 2 && s.dim === 0) return void full.set(local, (s.index * rows / s.parts) * cols);
  const piece = cols / s.groups / s.parts;
  let k = 0;
  for (let r = 0; r < rows; r++) for (let g = 0; g < s.groups; g++) for (let j = 0; j < piece; j++) full[r * cols + g * (cols / s.groups) + s.index * piece + j] = local[k++]!;
}

/** Full tensors reassembled from every rank's final parameters. */
export function assemble(ranks: Array<{ result?: Out; arrays: Float32Array | null }>, like: Map<string, Float32Array>): Map<string, Float32Array> {
  const got = new Map([...like].map(([k, v]) => [k, new Float32Array(v.length).fill(NaN)]));
  for (const x of ranks) {
    let o = 0;
    for (const p of x.result!.params) {
      const d = x.arrays!.subarray(o, o + p.size);
      o += p.size;
      if (p.shard) place(got.get(p.name)!, d, p.shard);
      else got.get(p.name)!.set(d);
    }
  }
  return got;
}

/** One process trains the whole global batch of each of `batches`' steps. */
export async function reference(batches: number[][]): Promise<{ losses: number[]; norms: number[]; data: Map<string, Float32Array> }> {
  const m = new GPT(CFG);
  const mom = m.params.map((p) => new Float32Array(p.size)), vel = m.params.map((p) => new Float32Array(p.size));
  const losses: number[] = [], norms: number[] = [];
  for (let s = 0; s < batches.length; s++) {
    for (const p of m.params) p.grad.fill(0);
    losses.push(await m.forwardBackward(Int32Array.from(batches[s]!), BATCH, { gradScale: 1 / (BATCH * CFG.seqLen) }));
    let sq = 0;
    for (const p of m.params) for (const g of p.grad) sq += g * g;
    const norm = Math.sqrt(sq);
    norms.push(norm);
    const c = Math.min(1, CLIP / (norm + 1e-6));
    const t = s + 1;
    m.params.forEach((p, k) => {
      for (let i = 0; i < p.size; i++) {
        const g = p.grad[i]! * c;
        mom[k]![i] = 0.9 * mom[k]![i]! + 0.1 * g;
        vel[k]![i] = 0.999 * vel[k]![i]! + 0.001 * g * g;
        const mh = mom[k]![i]! / (1 - 0.9 ** t), vh = vel[k]![i]! / (1 - 0.999 ** t);
        p.data[i] = p.data[i]! - LR * (mh / (Math.sqrt(vh) + 1e-8) + WD * p.data[i]!);
      }
    });
  }
  return { losses, norms, data: new Map(m.params.map((p) => [p.name, p.data])) };
}

/** Each element within float32 rounding of the single-process reference. */
export function expectNear(got: Map<string, Float32Array>, want: Map<string, Float32Array>): void {
  for (const [name, w] of want) {
    const g = got.get(name)!;
    for (let i = 0; i < w.length; i++) expect(Math.abs(g[i]! - w[i]!), `${name}[${i}]`).toBeLessThanOrEqual(2e-5 * Math.max(1, Math.abs(w[i]!)));
  }
}
