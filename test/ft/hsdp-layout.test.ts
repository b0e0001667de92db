/**
 * Elastic HSDP's layout (src/ft/hsdp-layout.ts) from member lists, against
 * expectations written out by hand: who keeps which slot, which replicas train, the
 * target step and which shard moves from whom to whom, and the refusal when no step
 * has every shard index.
 */
import { describe, expect, it } from 'vitest';
import { isNcclNodeError } from '../../src/errors.js';
import { assignSlots, placeOf, planShardSync } from '../../src/ft/hsdp-layout.js';
import type { Member } from '../../src/ft/membership.js';

const member = (id: string, step: number, founding: number): Member => ({ id, prevRank: -1, step, founding, ticket: 0, rank: 0 });
const shape = { replicas: 2, shard: 2 };

describe('elastic HSDP layout', () => {
  it('founding members take their RANK slots; a lost member parks its replica', () => {
    const all = [0, 1, 2, 3].map((r) => member(`m${r}`, 0, r));
    const first = assignSlots(all, new Map(), shape);
    expect(first).toEqual({ ...shape, slots: [0, 1, 2, 3], active: [0, 1] });
    // m2 lost: the survivors keep their slots, replica 1 has a hole.
    const prev = new Map(all.map((m, i) => [m.id, first.slots[i]!]));
    const after = assignSlots([all[0]!, all[1]!, all[3]!], prev, shape);
    expect(after.slots).toEqual([0, 1, 3]);
    expect(after.active).toEqual([0]);
    expect(placeOf(after, 2)).toEqual({ slot: 3, replica: -1, shardIndex: 1, dpRank: -1 });
    expect(placeOf(after, 1)).toEqual({ slot: 1, replica: 0, shardIndex: 1, dpRank: 1 });
  });

  it('a member without a slot takes its RANK slot when free, else a hole in the most complete replica; extras park', () => {
    const prev = new Map([['a', 0], ['b', 1], ['d', 3]]);
    // Replica 0 lost slot 1 (b gone), replica 1 lost slot 2; a spare with RANK 7 fills replica 0 first (one hole, not two).
    const m = [member('a', 5, 0), member('d', 3, 3), member('spare', -1, 7)];
    expect(assignSlots(m, new Map([['a', 0], ['d', 3]]), shape).slots).toEqual([0, 3, 1]);
    // A restarted RANK 2 takes slot 2 even though replica 0 has a hole too.
    expect(assignSlots([member('a', 5, 0), member('d', 3, 3), member('r2', -1, 2)], prev, shape).slots).toEqual([0, 3, 2]);
    // Five members for four slots: the last joiner has none.
    const five = [0, 1, 2, 3].map((r) => member(`m${r}`, 4, r)).concat([member('x', -1, 9)]);
    const l = assignSlots(five, new Map(five.slice(0, 4).map((x, i) => [x.id, i])), shape);
    expect(l.slots).toEqual([0, 1, 2, 3, -1]);
    expect(placeOf(l, 4).replica).toBe(-1);
  });

  it('the target is the newest step every shard index holds; members of active replicas behind it receive their shard index', () => {
    // Replica 0 (ranks 0, 1) trained to step 6; rank 2 was parked at step 3 in slot 3; rank 3 is a restarted process.
    const m = [member('a', 6, 0), member('b', 6, 1), member('d', 3, 3), member('r', -1, 2)];
    const layout = assignSlots(m, new Map([['a', 0], ['b', 1], ['d', 3]]), shape);
    expect(layout.active).toEqual([0, 1]);
    expect(planShardSync(m, layout)).toEqual({ target: 6, sends: [{ shardIndex: 0, source: 0, receiver: 3 }, { shardIndex: 1, source: 1, receiver: 2 }] });
    // A step only a replica that lost shard 0 committed cannot be the target: its shard 1 rolls back to step 4.
    const n = [member('a', 4, 0), member('b', 4, 1), member('d', 5, 3)];
    const l2 = assignSlots(n, new Map([['a', 0], ['b', 1], ['d', 3]]), shape);
    expect(l2.active).toEqual([0]);
    expect(planShardSync(n, l2)).toEqual({ target: 4, sends: [] });
  });

  it('no step with every shard index held: ERR_UNAVAILABLE with the full-restart exit code', () => {
    const m = [member('a', 4, 0), member('d', 5, 3)];
    const layout = assignSlots(m, new Map([['a', 0], ['d', 3]]), shape);
    let err: unknown;
    try {
      planShardSync(m, layout);
    } catch (e) {
      err = e;
    }
    expect(isNcclNodeError(err, 'ERR_UNAVAILABLE')).toBe(true);
    expect((err as { details: { exitCode: number } }).details.exitCode).toBe(75);
    expect((err as Error).message).toMatch(/shard 0 at \[4\]; shard 1 at \[5\]/);
  });
});
