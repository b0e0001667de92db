/**
 * Pipeline-parallel GPT against one process: the global batch cut into M
 * micro-batches and run through P stages by GPipe and by 1F1B gives the same
 * loss, gradients and SGD-updated parameters as one forward/backward of the whole
 * batch in one process (float32 rounding: micro-batch sums add in another order),
 * and 1F1B holds at most P - s micro-batches' activations on stage s where GPipe
 * holds all M. Also the schedules themselves: every micro-batch once forward and
 * once backward, each backward after its forward.
 */
import { describe, expect, it } from 'vitest';
import { GPT, type GPTConfig } from '../../src/models/gpt/gpt.js';
import { schedule } from '../../src/runtime/pipeline.js';
import { mulberry32 } from '../../src/util/prng.js';
import { describeRanks, runRanks } from '../helpers/ranks.js';

const CFG: GPTConfig = { vocab: 17, dim: 12, heads: 3, layers: 4, seqLen: 5, hidden: 24, seed: 9 };
const BATCH = 8, MICRO = 4, STEPS = 2, LR = 0.5;

describe('pipeline schedules', () => {
  it('visit every micro-batch once each way, backward after forward, 1F1B bounded by P - s', () => {
    for (const name of ['gpipe', '1f1b'] as const) {
      for (const P of [1, 2, 3, 4]) {
        for (let s = 0; s < P; s++) {
          const acts = schedule(name, P, s, 6);
          expect(acts.filter((a) => a.kind === 'F').map((a) => a.micro)).toEqual([0, 1, 2, 3, 4, 5]);
          expect(acts.filter((a) => a.kind === 'B').map((a) => a.micro)).toEqual([0, 1, 2, 3, 4, 5]);
          let live = 0, most = 0;
          for (const a of acts) {
            live += a.kind === 'F' ? 1 : -1;
            most = Math.max(most, live);
            expect(live).toBeGreaterThanOrEqual(0);
          }
          expect(most).toBe(name === 'gpipe' ? 6 : Math.min(P - s, 6));
        }
      }
    }
    expect(() => schedule('zigzag' as never, 2, 0, 2)).toThrow(/gpipe, 1f1b, interleaved-1f1b or zb-h1/);
  });

  it('ZB-H1: 1F1B\'s forwards and backwards, each W after its B, every stage holding at most P micro-batches', () => {
    for (const P of [1, 2, 3, 4]) {
      for (const M of [1, 2, 4, 6]) {
        for (let s = 0; s < P; s++) {
          const acts = schedule('zb-h1', P, s, M);
          const fb = acts.filter((a) => a.kind !== 'W');
          expect(fb).toEqual(schedule('1f1b', P, s, M)); // the same traffic, in the same order
          expect(acts.filter((a) => a.kind === 'W').map((a) => a.micro)).toEqual([...Array(M).keys()]);
          const backwardDone = new Set<number>();
          let live = 0, most = 0; // micro-batches between their F and their W
          for (const a of acts) {
            if (a.kind === 'B') backwardDone.add(a.micro);
            if (a.kind === 'W') expect(backwardDone.has(a.micro), `stage ${s}: W${a.micro} before its B`).toBe(true);
            live += a.kind === 'F' ? 1 : a.kind === 'W' ? -1 : 0;
            most = Math.max(most, live);
          }
          expect(most).toBeLessThanOrEqual(Math.max(P, 1));
          if (M >= P) expect(most).toBe(P); // every stage as full as 1F1B's first
        }
      }
    }
  });

  it('interleaved 1F1B: every (micro-batch, chunk) once each way, in an order every rank shares', () => {
    for (const [P, v, M] of [[2, 2, 4], [4, 2, 8], [2, 3, 6]] as const) {
      const orders = new Set<string>();
      for (let s = 0; s < P; s++) {
        const acts = schedule('interleaved-1f1b', P, s, M, v);
        const pairs = (kind: 'F' | 'B') => acts.filter((a) => a.kind === kind).map((a) => `${a.micro}/${a.chunk}`);
        const all = [...Array(M).keys()].flatMap((m) => [...Array(v).keys()].map((c) => `${m}/${c}`)).sort();
        expect([...pairs('F')].sort()).toEqual(all);
        expect([...pairs('B')].sort()).toEqual(all);
        orders.add(JSON.stringify([pairs('F'), pairs('B')]));
        // A chunk's backward comes after its forward.
        const seen = new Set<string>();
        for (const a of acts) {
          if (a.kind === 'F') seen.add(`${a.micro}/${a.chunk}`);
          else expect(seen.has(`${a.micro}/${a.chunk}`)).toBe(true);
        }
      }
      // The sends of one rank meet the next rank's receives in the same order.
      expect(orders.size).toBe(1);
    }
    expect(() => schedule('interleaved-1f1b', 4, 0, 6, 2)).toThrow(/divisible by the 4 stages/);
  });
});

describe('pipeline-parallel GPT', { timeout: 120_000 }, () => {
  const r = mulberry32(4);
  const tokens = Array.from({ length: BATCH * (CFG.seqLen + 1) }, () => Math.floor(r() * CFG.vocab));

  async function reference(): Promise<{ losses: number[]; grads: Map<string, Float32Array>; data: Map<string, Float32Array> }> {
    const m = new GPT(CFG);
    const losses: number[] = [];
    for (let s = 0; s < STEPS; s++) {
      for (const p of m.params) p.grad.fill(0);
      losses.push(await m.forwardBackward(Int32Array.from(tokens), BATCH, { gradScale: 1 / (BATCH * CFG.seqLen) }));
      for (const p of m.params) for (let i = 0; i < p.size; i++) p.data[i] = p.data[i]! - LR * p.grad[i]!;
    }
    return { losses, grads: new Map(m.params.map((p) => [p.name, p.grad])), data: new Map(m.params.map((p) => [p.name, p.data])) };
  }

  for (const [name, P, chunks] of [['gpipe', 2, 1], ['1f1b', 2, 1], ['1f1b', 4, 1], ['interleaved-1f1b', 2, 2], ['zb-h1', 2, 1], ['zb-h1', 4, 1]] as const) {
    it(`${name} over ${P} stages${chunks > 1 ? ` x ${chunks} chunks` : ''} equals one process`, async () => {
      const ref = await reference();
      const ranks = await runRanks<{ losses: number[]; held: number; params: Array<{ name: string; size: number }> }>('test/models/pp-worker.ts', P, {
        payload: { cfg: CFG, tokens, batch: BATCH, micro: MICRO, steps: STEPS, lr: LR, name, chunks },
      });
      expect(ranks.every((x) => x.code === 0), describeRanks(ranks)).toBe(true);
      const seen = new Set<string>();
      for (const x of ranks) {
        if (name !== 'interleaved-1f1b') expect(x.result!.held).toBe(name === 'gpipe' ? MICRO : Math.min(P - x.rank, MICRO)); // zb-h1: until B
        else expect(x.result!.held).toBeLessThanOrEqual(Math.min((P - x.rank - 1) * 2 + (chunks - 1) * P + 1, MICRO * chunks));
        let o = 0;
        for (const p of x.result!.params) {
          seen.add(p.name);
          const g = x.arrays!.subarray(o, o + p.size), d = x.arrays!.subarray(o + p.size, o + 2 * p.size);
          o += 2 * p.size;
          const wantG = ref.grads.get(p.name)!, wantD = ref.data.get(p.name)!;
          const scale = Math.max(...wantG.map(Math.abs));
          for (let i = 0; i < p.size; i++) {
            expect(Math.abs(g[i]! - wantG[i]!), `${p.name}[${i}] grad`).toBeLessThanOrEqual(1e-4 * scale + 1e-7);
            expect(Math.abs(d[i]! - wantD[i]!), `${p.name}[${i}]`).toBeLessThanOrEqual(1e-5 * Math.max(1, Math.abs(wantD[i]!)));
          }
        }
      }
      expect([...seen].sort()).toEqual([...ref.grads.keys()].sort());
      const last = ranks[P - 1]!.result!.losses;
      for (let s = 0; s < STEPS; s++) expect(last[s]).toBeCloseTo(ref.losses[s]!, 5);
    });
  }

  it('ZB-H1 is bit-identical to 1F1B at 4 stages (the same sums, the weight gradients only later)', async () => {
    type Out = { losses: number[]; params: Array<{ name: string; size: number }> };
    const run = (name: string) => runRanks<Out>('test/models/pp-worker.ts', 4, { payload: { cfg: CFG, tokens, batch: BATCH, micro: MICRO, steps: STEPS, lr: LR, name } });
    const plain = await run('1f1b'), split = await run('zb-h1');
    expect([...plain, ...split].every((x) => x.code === 0), describeRanks([...plain, ...split])).toBe(true);
    for (let rank = 0; rank < 4; rank++) {
      expect(Buffer.from(split[rank]!.arrays!.buffer).equals(Buffer.from(plain[rank]!.arrays!.buffer)), `rank ${rank}`).toBe(true);
    }
    expect(split[3]!.result!.losses).toEqual(plain[3]!.result!.losses);
  });

  it('activation recomputation: bit-identical to storing activations, holding only each block\'s input', async () => {
    type Out = { losses: number[]; held: number; heldElements: number; params: Array<{ name: string; size: number }> };
    const P = 2;
    const run = (recompute: boolean) => runRanks<Out>('test/models/pp-worker.ts', P, {
      payload: { cfg: CFG, tokens, batch: BATCH, micro: MICRO, steps: STEPS, lr: LR, name: '1f1b', recompute },
    });
    const stored = await run(false), recomputed = await run(true);
    expect([...stored, ...recomputed].every((x) => x.code === 0), describeRanks([...stored, ...recomputed])).toBe(true);
    const blockInput = (BATCH / MICRO) * CFG.seqLen * CFG.dim, blocksPerStage = CFG.layers / P;
    for (let rank = 0; rank < P; rank++) {
      const a = stored[rank]!, b = recomputed[rank]!;
      expect(Buffer.from(b.arrays!.buffer).equals(Buffer.from(a.arrays!.buffer)), `rank ${rank}: gradients and parameters`).toBe(true);
      expect(b.result!.losses).toEqual(a.result!.losses);
      // 1F1B holds P - s micro-batches on stage s; with recomputation each is only its blocks' inputs.
      expect(b.result!.heldElements).toBe((P - rank) * blocksPerStage * blockInput);
      expect(a.result!.heldElements).toBeGreaterThan(5 * b.result!.heldElements);
    }
  });
});
