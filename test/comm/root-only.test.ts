/**
 * rootOnly(): the rooted calls' options checked without zod when they are `{ root: r }`
 * alone (a reduce's `{ root: r, out }` too). The reference is the schema itself: whatever
 * rootOnly() lets through, the schema accepts with the same result, and nothing the
 * schema refuses gets through.
 */
import { describe, expect, it } from 'vitest';
import { reduceSchema, rootedSchema, rootOnly } from '../../src/comm/call-options.js';

class WithRoot {
  root = 1;
}

const cases: unknown[] = [
  { root: 0 }, { root: 3 }, { root: 2 ** 31 }, { root: Number.MAX_SAFE_INTEGER }, { root: -0 },
  { root: -1 }, { root: 1.5 }, { root: NaN }, { root: Infinity }, { root: 2 ** 60 }, { root: '1' }, { root: 1n },
  { root: null }, { root: undefined }, {}, { root: 0, dtype: 'float32' }, { root: 0, timeoutMs: 5 }, { root: 0, extra: 1 },
  { rooot: 0 }, Object.create({ root: 0 }), Object.assign(Object.create(null), { root: 0 }), new WithRoot(), [0],
  null, undefined, 0, 'root', Object.defineProperty({ root: 1 }, 'hidden', { value: 2, enumerable: false }),
  { root: 0, out: new Float32Array(4) }, { root: 2, out: undefined }, { root: 1, out: 'x' }, { out: new Float32Array(4) },
  { root: -1, out: new Float32Array(4) }, { root: 0, out: new Float32Array(4), op: 'max' },
];
const out = new Float32Array(4);

describe('rootOnly', () => {
  it('lets through { root } alone (and a reduce\'s { root, out }), where the schemas accept it with the same result', () => {
    const through = { rooted: 0, reduce: 0 };
    for (const value of cases) {
      for (const [schema, withOut, name] of [[rootedSchema, false, 'rooted'], [reduceSchema, false, 'rooted'], [reduceSchema, true, 'reduce']] as const) {
        const fast = rootOnly(value, withOut);
        const slow = schema.safeParse(value);
        if (fast !== undefined) {
          through[name]++;
          expect(slow.success, JSON.stringify(value)).toBe(true);
          expect(fast).toEqual(slow.data);
          if ('out' in fast) expect(fast.out).toBe((value as { out: unknown }).out);
        }
      }
    }
    // The usual calls do take the fast path: the five { root: n } above and the one with a
    // hidden key, through both schemas; a reduce's also the three with `out`.
    expect(through).toEqual({ rooted: 2 * 6, reduce: 6 + 3 });
    expect(rootOnly({ root: 7 })).toEqual({ root: 7 });
    expect(rootOnly({ root: 7, out }, true)).toEqual({ root: 7, out });
  });

  it('leaves everything else to the schema', () => {
    for (const value of [{ root: -1 }, { root: 1.5 }, { root: '1' }, { root: 0, dtype: 'float32' }, { root: 0, extra: 1 },
      {}, Object.create({ root: 0 }), new WithRoot(), [0], null, 0, { root: 0, out }]) {
      expect(rootOnly(value), JSON.stringify(value)).toBeUndefined();
    }
    for (const value of [{ out }, { root: -1, out }, { root: 0, out, op: 'max' }, { root: 0, out, dtype: 'float32' }]) {
      expect(rootOnly(value, true)).toBeUndefined();
    }
  });
});
