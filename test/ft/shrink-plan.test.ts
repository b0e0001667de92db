/**
 * Which ranks an elastic NCCL generation excludes when it shrinks the previous
 * communicator (shrinkExclude), against lists written out by hand: every member must
 * come from the previous generation and offer to shrink it, or every member inits.
 */
import { describe, expect, it } from 'vitest';
import { shrinkExclude } from '../../src/ft/group.js';
import type { Member } from '../../src/ft/membership.js';

const m = (prevRank: number, rank: number, shrink?: { gen: number; size: number }): Member =>
  ({ id: `p${prevRank}`, prevRank, step: 3, ticket: rank + 1, rank, shrink });

describe('shrinkExclude', () => {
  it('survivors of a 4-rank generation 2 exclude the ranks that did not come', () => {
    const s = { gen: 2, size: 4 };
    expect(shrinkExclude([m(0, 0, s), m(3, 1, s)], 3, 4)).toEqual([1, 2]);
    expect(shrinkExclude([m(1, 0, s), m(2, 1, s), m(3, 2, s)], 3, 4)).toEqual([0]);
    // The same members after a transient fault: a shrink that excludes nobody.
    expect(shrinkExclude([0, 1, 2, 3].map((r) => m(r, r, s)), 3, 4)).toEqual([]);
  });

  it('a joiner, a member that cannot shrink, or another generation\'s communicator means init', () => {
    const s = { gen: 2, size: 4 };
    expect(shrinkExclude([m(0, 0, s), m(-1, 1)], 3, 4)).toBeUndefined();
    expect(shrinkExclude([m(0, 0, s), m(1, 1)], 3, 4)).toBeUndefined();
    expect(shrinkExclude([m(0, 0, s), m(1, 1, { gen: 1, size: 4 })], 3, 4)).toBeUndefined();
    expect(shrinkExclude([m(0, 0, s), m(1, 1, { gen: 2, size: 3 })], 3, 4)).toBeUndefined();
  });
});
