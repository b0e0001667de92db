/** Optimizer state accessors and the per-parameter piece mapping behind dp.stateDict() (no processes). */
import { describe, expect, it } from 'vitest';
import { AdamW, SGD, createOptimizer } from '../../src/runtime/optim.js';
import { rangePieces, slotState } from '../../src/runtime/state-dict.js';
import type { ParamLike } from '../../src/runtime/types.js';

const grad = (n: number, k: number) => Float32Array.from({ length: n }, (_, i) => Math.sin(i + k));

describe('optimizer state', () => {
  it('AdamW: state() then loadState() into a fresh optimizer continues bit-exactly', () => {
    const a = createOptimizer({ kind: 'adamw', lr: 0.01, weightDecay: 0.1 }) as AdamW;
    const pa = new Float32Array(5).fill(1);
    for (let k = 0; k < 3; k++) a.step([{ key: 'u', param: pa, grad: grad(5, k) }]);
    const s = a.state([{ key: 'u', size: 5 }]);
    expect(s.step).toBe(3);
    expect(Object.keys(s.tensors).sort()).toEqual(['u.exp_avg', 'u.exp_avg_sq']);

    const b = createOptimizer({ kind: 'adamw', lr: 0.01, weightDecay: 0.1 });
    b.loadState({ step: s.step, tensors: Object.fromEntries(Object.entries(s.tensors).map(([k, v]) => [k, v.slice()])) });
    const pb = pa.slice();
    a.step([{ key: 'u', param: pa, grad: grad(5, 9) }]);
    b.step([{ key: 'u', param: pb, grad: grad(5, 9) }]);
    expect(Buffer.from(pb.buffer)).toEqual(Buffer.from(pa.buffer));
  });

  it('state() allocates zeros before the first step; tensors are live views', () => {
    const o = new AdamW({ lr: 1, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0 });
    const s = o.state([{ key: 'k', size: 3 }]);
    expect([...s.tensors['k.exp_avg']!]).toEqual([0, 0, 0]);
    s.tensors['k.exp_avg']![1] = 7;
    expect(o.state([{ key: 'k', size: 3 }]).tensors['k.exp_avg']![1]).toBe(7);
  });

  it('SGD keeps a momentum buffer and a step count; bad input is a stable error', () => {
    const o = new SGD({ lr: 0.1, momentum: 0.9, weightDecay: 0 });
    o.step([{ key: 'p', param: new Float32Array(2), grad: new Float32Array([1, 2]) }]);
    const s = o.state([{ key: 'p', size: 2 }]);
    expect(s.step).toBe(1);
    expect([...s.tensors['p.momentum_buffer']!]).toEqual([1, 2]);
    expect(() => o.loadState({ step: 1, tensors: { 'p.exp_avg': new Float32Array(2) } })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT' }));
    expect(() => o.loadState({ step: 1, tensors: { 'p.momentum_buffer': new Float32Array(3) } })).toThrow(expect.objectContaining({ code: 'ERR_SIZE_MISMATCH' }));
    expect(() => o.loadState({ step: -1 })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT' }));
  });
});

describe('rangePieces', () => {
  const p = (name: string, size: number, shape?: number[]): ParamLike => ({ name, size, ...(shape ? { shape } : {}), data: new Float32Array(size), grad: new Float32Array(size) });
  it('cuts a padded unit shard at parameter borders, with offsets into each parameter', () => {
    // Unit [a: 2x3][b: 4] = 10 elements, 3 ranks: shard 4, padded 12; rank 1 holds [4, 8).
    const params = [p('a', 6, [2, 3]), p('b', 4)];
    const master = Float32Array.from([4, 5, 6, 7]);
    const m = Float32Array.from([40, 50, 60, 70]);
    const out = rangePieces(params, [0, 6], 4, 8, { '': master, exp_avg: m });
    expect(Object.keys(out).sort()).toEqual(['a', 'a.exp_avg', 'b', 'b.exp_avg']);
    expect(out.a).toMatchObject({ globalShape: [2, 3], offset: 4, length: 2 });
    expect([...out.a!.data]).toEqual([4, 5]);
    expect(out.b).toMatchObject({ globalShape: [4], offset: 0, length: 2 });
    expect([...out['b.exp_avg']!.data]).toEqual([60, 70]);
    // Views: a load fills the optimizer's and the master's arrays in place.
    out['b.exp_avg']!.data[0] = -1;
    expect(m[2]).toBe(-1);
    // The last rank's shard [8, 12) holds 2 real elements and 2 of padding, which is never saved.
    const last = rangePieces(params, [0, 6], 8, 12, { '': new Float32Array(4) });
    expect(last.b).toMatchObject({ offset: 2, length: 2 });
    expect(last.a).toBeUndefined();
  });

  it('slotState names state by kind', () => {
    const o = createOptimizer({ kind: 'adamw', lr: 1 });
    expect(Object.keys(slotState(o, 'unit3', 4)).sort()).toEqual(['exp_avg', 'exp_avg_sq']);
  });
});
