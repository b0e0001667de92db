/**
 * Who does what in an elastic HSDP group (hsdp-train.ts), as pure functions of a
 * generation's member list, so every member computes the same answer.
 *
 * The world has R x S slots: replica r, shard index s is slot r * S + s. A member
 * keeps its slot from generation to generation; a member without one (a restarted
 * rank, a spare, a member that came back late) takes a free slot, its own RANK's if
 * that is free, else one in the replica closest to complete. A replica trains when
 * all S of its slots are held; members of a replica with a hole, and members beyond
 * the R x S slots, are parked: they keep their shard's state and wait.
 *
 * State transfer is per shard index: the replicas of shard s hold the same bytes, so
 * a member behind receives only its shard (master parameters, optimizer moments, the
 * train state) from a member of another replica that holds the same shard index at
 * the target step. The target is the newest step at which every shard index is held
 * by someone: a step only one replica committed before it broke cannot be used when
 * that replica lost a shard.
 */
import { NcclNodeError } from '../errors.js';
import { EXIT_FULL_RESTART } from './ladder.js';
import type { Member } from './membership.js';

export interface HsdpShape {
  replicas: number;
  shard: number;
}

/** A generation's layout: the slot of each member (by rank; -1 none) and the replicas that train. */
export interface HsdpLayout extends HsdpShape {
  slots: number[];
  /** Complete replicas in replica order: the position in this list is the replica's place in the data order. */
  active: number[];
}

/**
 * Slots for `members` (by rank). `previous` maps a member id to the slot it held
 * in the generation before; members of that generation keep theirs.
 */
export function assignSlots(members: readonly Member[], previous: ReadonlyMap<string, number>, shape: HsdpShape): HsdpLayout {
  const { replicas: R, shard: S } = shape;
  const slots = members.map(() => -1);
  const taken = new Set<number>();
  members.forEach((m, i) => {
    const s = previous.get(m.id);
    if (s !== undefined && s >= 0 && s < R * S && !taken.has(s)) {
      slots[i] = s;
      taken.add(s);
    }
  });
  const filled = (r: number) => Array.from({ length: S }, (_, s) => r * S + s).filter((x) => taken.has(x)).length;
  members.forEach((m, i) => {
    if (slots[i]! >= 0 || taken.size === R * S) return;
    let slot = m.founding !== undefined && m.founding >= 0 && m.founding < R * S && !taken.has(m.founding) ? m.founding : -1;
    if (slot < 0) {
      // Fill the replica with the fewest holes first: it trains again soonest.
      let best = -1;
      for (let r = 0; r < R; r++) if (filled(r) < S && (best < 0 || filled(r) > filled(best))) best = r;
      for (let s = 0; s < S && slot < 0; s++) if (!taken.has(best * S + s)) slot = best * S + s;
    }
    slots[i] = slot;
    taken.add(slot);
  });
  const active = Array.from({ length: R }, (_, r) => r).filter((r) => filled(r) === S);
  return { ...shape, slots, active };
}

/** This member's place: the replica's position among the active ones (-1: parked) and its shard index. */
export function placeOf(layout: HsdpLayout, rank: number): { slot: number; replica: number; shardIndex: number; dpRank: number } {
  const slot = layout.slots[rank]!;
  const replica = slot < 0 ? -1 : layout.active.indexOf(Math.floor(slot / layout.shard));
  const shardIndex = slot < 0 ? -1 : slot % layout.shard;
  return { slot, replica, shardIndex, dpRank: replica < 0 ? -1 : replica * layout.shard + shardIndex };
}

export interface ShardSend {
  shardIndex: number;
  /** Ranks in the generation's world communicator. */
  source: number;
  receiver: number;
}

export interface ShardSyncPlan {
  /** The committed step every active member holds after the transfer. */
  target: number;
  sends: ShardSend[];
}

/**
 * The target step and the transfers that bring every member of an active replica to
 * it (member.step: the step of the shard state a member holds, -1 none). ERR_UNAVAILABLE
 * with EXIT_FULL_RESTART when no step has all S shard indices held.
 */
export function planShardSync(members: readonly Member[], layout: HsdpLayout): ShardSyncPlan {
  const S = layout.shard;
  const held = Array.from({ length: S }, () => new Map<number, number>()); // step -> lowest rank holding it
  members.forEach((m, i) => {
    const slot = layout.slots[i]!;
    if (slot < 0 || m.step < 0) return;
    const byStep = held[slot % S]!;
    if (!byStep.has(m.step)) byStep.set(m.step, i);
  });
  const candidates = [...held[0]!.keys()].filter((step) => held.every((h) => h.has(step)));
  if (candidates.length === 0) {
    throw new NcclNodeError('ERR_UNAVAILABLE', `elastic HSDP: no step at which all ${S} shard indices are held by a live member (held: ${held.map((h, s) => `shard ${s} at [${[...h.keys()].join(', ')}]`).join('; ')})`, { exitCode: EXIT_FULL_RESTART });
  }
  const target = Math.max(...candidates);
  const sends: ShardSend[] = [];
  for (let s = 0; s < S; s++) {
    members.forEach((m, i) => {
      const p = placeOf(layout, i);
      if (p.replica >= 0 && p.shardIndex === s && m.step !== target) sends.push({ shardIndex: s, source: held[s]!.get(target)!, receiver: i });
    });
  }
  return { target, sends };
}
