/**
 * The host staging pool: memory is reused, the budget is never exceeded, ranges in
 * use never overlap, and saves through it still load back exactly what was saved,
 * also with two saves in flight.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Checkpointer, load, stepDirName, type CheckpointState } from '../../src/checkpoint/index.js';
import { HostPool } from '../../src/checkpoint/host-pool.js';

const roots: string[] = [];
function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), 'ckpt-pool-'));
  roots.push(d);
  return d;
}
afterEach(() => {
  for (const d of roots.splice(0)) rmSync(d, { recursive: true, force: true });
});

const MiB = 1 << 20;
/** [start, end) of a view in its ArrayBuffer, with the buffer, for overlap checks. */
const span = (u: Uint8Array) => ({ buf: u.buffer, lo: u.byteOffset, hi: u.byteOffset + u.byteLength });
const overlap = (a: Uint8Array, b: Uint8Array) => {
  const x = span(a), y = span(b);
  return x.buf === y.buf && x.lo < y.hi && y.lo < x.hi;
};

describe('HostPool', () => {
  it('hands the same memory out again after it is given back, and counts hits and misses', () => {
    const pool = new HostPool(256 * MiB);
    const a = pool.take(3 * MiB + 5);
    expect(a.byteLength).toBe(3 * MiB + 5);
    expect(pool.stats()).toMatchObject({ misses: 1, hits: 0, overBudget: 0, inUseBytes: 3 * MiB + 4096 });
    a.fill(7);
    pool.give(a);
    expect(pool.stats().inUseBytes).toBe(0);
    const b = pool.take(3 * MiB + 5);
    expect(b.buffer).toBe(a.buffer);
    expect(b.byteOffset).toBe(a.byteOffset);
    expect(b[0]).toBe(7); // the same bytes, not a fresh (zeroed) allocation
    expect(pool.stats()).toMatchObject({ misses: 1, hits: 1, slabs: 1 });
  });

  it('never holds more than its budget; what does not fit is memory of its own, outside the pool', () => {
    const pool = new HostPool(10 * MiB);
    const parts = [4, 4, 4, 1].map((m) => pool.take(m * MiB));
    const s = pool.stats();
    expect(s.heldBytes).toBeLessThanOrEqual(10 * MiB);
    // The first slab takes the whole budget (10 MiB < the 64 MiB minimum slab): 4 + 4 fit, the third 4 does not, 1 does.
    expect(s).toMatchObject({ slabs: 1, heldBytes: 10 * MiB, misses: 1, hits: 2, overBudget: 1, inUseBytes: 9 * MiB });
    const outside = parts[2]!;
    expect([parts[0], parts[1], parts[3]].some((p) => p!.buffer === outside.buffer)).toBe(false);
    pool.give(outside); // not the pool's: ignored
    expect(pool.stats().inUseBytes).toBe(9 * MiB);
    for (let i = 0; i < parts.length; i++) for (let j = i + 1; j < parts.length; j++) expect(overlap(parts[i]!, parts[j]!)).toBe(false);
    // Given back in any order, the free ranges merge: the whole budget fits again in one piece.
    pool.give(parts[1]!);
    pool.give(parts[3]!);
    pool.give(parts[0]!);
    const whole = pool.take(10 * MiB);
    expect(whole.buffer).toBe(parts[0]!.buffer);
    expect(pool.stats()).toMatchObject({ heldBytes: 10 * MiB, slabs: 1, overBudget: 1 });
  });

  it('budget 0 is no pool: every request is memory of its own', () => {
    const pool = new HostPool(0);
    const a = pool.take(MiB);
    pool.give(a);
    const b = pool.take(MiB);
    expect(b.buffer).not.toBe(a.buffer);
    expect(pool.stats()).toMatchObject({ heldBytes: 0, hits: 0, misses: 0, overBudget: 2 });
  });

  it('reserve() holds min(request, budget), touched, and later takes are hits', async () => {
    const pool = new HostPool(40 * MiB);
    await pool.reserve(100 * MiB, 8 * MiB);
    expect(pool.stats()).toMatchObject({ heldBytes: 40 * MiB, inUseBytes: 0, misses: 0 });
    const got = [1, 2, 3, 4].map(() => pool.take(8 * MiB));
    expect(pool.stats()).toMatchObject({ hits: 4, misses: 0, overBudget: 0, heldBytes: 40 * MiB });
    for (const g of got) expect(g.every((v) => v === 0)).toBe(true);
  });
});

/** Two large tensors (native parallel copy path) and a small one, values depending on `k`. */
function state(step: number, k: number, big: Float32Array, big2: Float64Array, small: Int32Array): CheckpointState {
  for (let i = 0; i < big.length; i++) big[i] = i * 0.5 + k;
  for (let i = 0; i < big2.length; i++) big2[i] = -i - k * 1e6;
  for (let i = 0; i < small.length; i++) small[i] = i ^ k;
  return {
    tensors: {
      big: { data: big, globalShape: [big.length], offset: 0 },
      big2: { data: big2, globalShape: [big2.length], offset: 0 },
      small: { data: small, globalShape: [small.length], offset: 0 },
    },
    train: { step },
  };
}

async function loadStep(root: string, step: number, n: [number, number, number]) {
  const t = { big: { data: new Float32Array(n[0]), offset: 0 }, big2: { data: new Float64Array(n[1]), offset: 0 }, small: { data: new Int32Array(n[2]), offset: 0 } };
  const r = await load(join(root, stepDirName(step)), t);
  expect(r.step).toBe(step);
  return t;
}

describe('Checkpointer with the staging pool', () => {
  const n: [number, number, number] = [(3 * MiB) / 4 + 3, (2 * MiB) / 8 + 1, 100];

  for (const budget of [64 * MiB, 3 * MiB]) {
    it(`two saves in flight keep their own buffers; later saves reuse them (budget ${budget / MiB} MiB)`, async () => {
      const root = tmp();
      const ck = await Checkpointer.create(root, { keep: 0, staging: { budgetBytes: budget } });
      const big = new Float32Array(n[0]), big2 = new Float64Array(n[1]), small = new Int32Array(n[2]);
      await ck.prepare(state(0, 0, big, big2, small));
      const prepared = ck.stagingStats();
      expect(prepared.heldBytes).toBeLessThanOrEqual(budget);
      // Save 1, then change the state and save 2 before save 1 has been written: both are in flight.
      const h1 = await ck.save(state(1, 1, big, big2, small));
      const h2 = await ck.save(state(2, 2, big, big2, small));
      expect(ck.inFlight).toBe(2);
      await Promise.all([h1.committed, h2.committed]);
      const afterTwo = ck.stagingStats();
      expect(afterTwo.inUseBytes).toBe(0);
      // A third save, after both committed, is served from memory already held.
      await (await ck.save(state(3, 3, big, big2, small))).committed;
      const s = ck.stagingStats();
      expect(s.heldBytes).toBeLessThanOrEqual(budget);
      expect(s.heldBytes).toBe(afterTwo.heldBytes);
      if (budget === 64 * MiB) {
        // Prepared for two saves: every request of the three saves was a hit on touched memory.
        expect(s).toMatchObject({ misses: 0, overBudget: 0, hits: 9 });
      } else {
        // 3 MiB holds one big piece at a time: the rest goes outside the pool, and is right too.
        expect(s.overBudget).toBeGreaterThan(0);
      }
      for (const step of [1, 2, 3]) {
        const t = await loadStep(root, step, n);
        const want = state(step, step, new Float32Array(n[0]), new Float64Array(n[1]), new Int32Array(n[2]));
        expect(Buffer.from(t.big.data.buffer).equals(Buffer.from((want.tensors.big!.data as Float32Array).buffer)), `step ${step} big`).toBe(true);
        expect(Buffer.from(t.big2.data.buffer).equals(Buffer.from((want.tensors.big2!.data as Float64Array).buffer)), `step ${step} big2`).toBe(true);
        expect([...t.small.data]).toEqual([...(want.tensors.small!.data as Int32Array)]);
      }
      await ck.close();
    }, 60_000);
  }

  it('a save refused for a bad tensor gives back what its snapshot had taken', async () => {
    const root = tmp();
    const ck = await Checkpointer.create(root, { keep: 0, staging: { budgetBytes: 64 * MiB } });
    const good = new Float32Array(MiB).fill(1);
    const bad = { data: new Float32Array(4), globalShape: [4], offset: 2 }; // [2, 6) of 4 elements
    const err = await ck.save({ tensors: { good: { data: good, globalShape: [MiB], offset: 0 }, bad }, train: { step: 1 } }).catch((e: unknown) => e);
    expect(String(err)).toMatch(/outside its 4 elements/);
    expect(ck.stagingStats()).toMatchObject({ inUseBytes: 0, misses: 1 });
    await ck.close();
  });
});
