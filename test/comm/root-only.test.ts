/**
 * rootOnly(): the rooted calls' options checked without zod when they are `{ root: r }`
 * alone. The reference is the schema itself: whatever rootOnly() lets through, the
 * schema accepts with the same result, and nothing the schema refuses gets through.
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
];

describe('rootOnly', () => {
  it('lets through { root } alone, where the schemas accept it with the same result', () => {
    let through = 0;
    for (const value of cases) {
      const fast = rootOnly(value);
      for (const schema of [rootedSchema, reduceSchema]) {
        const slow = schema.safeParse(value);
        if (fast !== undefined) {
          through++;
          expect(slow.success, JSON.stringify(value)).toBe(true);
          expect(fast).toEqual(slow.data);
        }
      }
    }
    // The usual calls do take the fast path: the five { root: n } above and the one with a hidden key.
    expect(through).toBe(2 * 6);
    expect(rootOnly({ root: 7 })).toEqual({ root: 7 });
  });

  it('leaves everything else to the schema', () => {
    for (const value of [{ root: -1 }, { root: 1.5 }, { root: '1' }, { root: 0, dtype: 'float32' }, { root: 0, extra: 1 },
      {}, Object.create({ root: 0 }), new WithRoot(), [0], null, 0]) {
      expect(rootOnly(value), JSON.stringify(value)).toBeUndefined();
    }
  });
});
