/**
 * Decisions of in-memory checkpoints, computed identically on every rank from the
 * same all-gathered facts (pure functions), and the small exchange that gathers
 * them: where each rank's replica goes, which step (and from where) a restore takes,
 * and whether some rank failed. No rank ever decides alone, so no two ranks restore
 * different steps, and a rank that fails takes the others down with it instead of
 * leaving them waiting.
 */
import type { Communicator } from '../comm/communicator.js';
import { NcclNodeError, type ErrorCode } from '../errors.js';

/** Where a rank runs: its node (GROUP_RANK) and its local rank there. */
export interface Placement {
  node: number;
  localRank: number;
}

/**
 * holder[r]: the rank that keeps r's replica. With several nodes it is the rank with
 * r's local rank on the next node (nodes ordered by id, wrapping), so losing a whole
 * node never loses both copies; a next node with fewer ranks takes local rank modulo
 * its size. On one node: rank r + 1 (wrapping). A world of one has no holder (-1).
 */
export function holders(places: readonly Placement[]): number[] {
  const world = places.length;
  if (world === 1) return [-1];
  const nodes = [...new Set(places.map((p) => p.node))].sort((a, b) => a - b);
  if (nodes.length === 1) return places.map((_, r) => (r + 1) % world);
  const onNode = new Map(nodes.map((n) => [n, [] as number[]]));
  places.forEach((p, r) => onNode.get(p.node)!.push(r));
  for (const ranks of onNode.values()) ranks.sort((a, b) => places[a]!.localRank - places[b]!.localRank);
  return places.map((p) => {
    const next = onNode.get(nodes[(nodes.indexOf(p.node) + 1) % nodes.length]!)!;
    return next.find((r) => places[r]!.localRank === p.localRank) ?? next[p.localRank % next.length]!;
  });
}

/** One snapshot copy a rank holds, as it reports it to the others. */
export interface HeldEntry {
  owner: number;
  world: number;
  step: number;
  bytes: number;
  /** Its digest checked out just now. */
  ok: boolean;
  error?: string;
}

/** What one rank brings to a restore. */
export interface Inventory {
  rank: number;
  place: Placement;
  own: HeldEntry | null;
  replicas: HeldEntry[];
  /** Rank 0 only: the newest committed durable checkpoint, if a root was given. */
  durable?: { dir: string; step: number } | null;
}

export type Source = 'memory' | 'peer' | 'disk';

export interface RestorePlan {
  /** 'memory': every rank restores `step` from its own copy or a peer's; 'disk': all load `durable`; 'none': nothing to restore. */
  kind: 'memory' | 'disk' | 'none';
  step: number;
  /** Per rank: -1 = its own copy, else the rank that sends it the replica (memory plans). */
  from: number[];
  durable: { dir: string; step: number } | null;
  /** Copies that failed their digest or were taken in another world size (not used), and why. */
  rejected: { holder: number; owner: number; step: number; error: string }[];
}

/**
 * The newest step every rank can restore from memory (its own copy, else a replica
 * a peer holds), all from the same step; a newer durable checkpoint wins over it,
 * and with no such step the durable one is the answer.
 */
export function planRestore(inv: readonly Inventory[]): RestorePlan {
  const world = inv.length;
  const rejected: RestorePlan['rejected'] = [];
  const usable = (holder: number, e: HeldEntry | null): e is HeldEntry => {
    if (!e) return false;
    if (!e.ok) rejected.push({ holder, owner: e.owner, step: e.step, error: e.error ?? 'digest mismatch' });
    // A restart that changed the world size cannot use the snapshots: their pieces are cut for the old one.
    else if (e.world !== world) rejected.push({ holder, owner: e.owner, step: e.step, error: `taken in a world of ${e.world} ranks, this one has ${world}` });
    return e.ok && e.world === world && e.owner >= 0 && e.owner < world;
  };
  // copies[r]: step -> who can supply rank r's state at that step (-1: r itself).
  const copies = Array.from({ length: world }, () => new Map<number, number>());
  for (const i of inv) {
    if (usable(i.rank, i.own) && i.own.owner === i.rank) copies[i.rank]!.set(i.own.step, -1);
    for (const e of i.replicas) {
      if (usable(i.rank, e) && e.owner !== i.rank && !copies[e.owner]!.has(e.step)) copies[e.owner]!.set(e.step, i.rank);
    }
  }
  const steps = [...copies[0]!.keys()].filter((s) => copies.every((c) => c.has(s)));
  const step = steps.length ? Math.max(...steps) : -1;
  const durable = inv[0]?.durable ?? null;
  if (step >= 0 && !(durable && durable.step > step)) {
    return { kind: 'memory', step, from: copies.map((c) => c.get(step)!), durable, rejected };
  }
  if (durable) return { kind: 'disk', step: durable.step, from: [], durable, rejected };
  return { kind: 'none', step: -1, from: [], durable: null, rejected };
}

/** Size of `owner`'s frame of `step`, from whichever rank reported a sound copy of it. */
export function sizeOf(inv: Inventory[], owner: number, step: number): number {
  for (const i of inv) {
    for (const e of [i.own, ...i.replicas]) if (e && e.ok && e.owner === owner && e.step === step) return e.bytes;
  }
  throw new NcclNodeError('ERR_INVALID_ARGUMENT', `in-memory restore: no rank holds rank ${owner}'s snapshot of step ${step}`);
}

/** Slot of gatherSmall(): values that encode to more fall back to allGatherObject's two rounds. */
const SMALL = 2048;

/**
 * allGatherObject in one round instead of two: every rank's JSON in a fixed slot.
 * A rank whose value does not fit says so in its slot, and then all ranks take the
 * two-round path, so they stay in step.
 */
export async function gatherSmall<T>(comm: Communicator, value: T, timeoutMs: number | undefined): Promise<T[]> {
  if (comm.size === 1) return [structuredClone(value)];
  const bytes = new TextEncoder().encode(JSON.stringify(value));
  const slot = new Uint8Array(SMALL);
  const fits = bytes.length <= SMALL - 4;
  new DataView(slot.buffer).setUint32(0, fits ? bytes.length : 0xffffffff, true);
  if (fits) slot.set(bytes, 4);
  const all = new Uint8Array(SMALL * comm.size);
  await comm.allGather(slot, all, { timeoutMs });
  const lens = Array.from({ length: comm.size }, (_, r) => new DataView(all.buffer, r * SMALL, 4).getUint32(0, true));
  if (lens.some((n) => n === 0xffffffff)) return comm.allGatherObject(value, { timeoutMs });
  return lens.map((n, r) => JSON.parse(new TextDecoder().decode(all.subarray(r * SMALL + 4, r * SMALL + 4 + n))) as T);
}

export interface Failure {
  code: ErrorCode;
  message: string;
}

export function failureOf(err: unknown): Failure {
  return { code: err instanceof NcclNodeError ? err.code : 'ERR_INVALID_ARGUMENT', message: (err as Error).message };
}

/** Every rank throws the first failing rank's error (its code, its message). */
export function throwIfFailed(facts: { failure?: Failure }[], what: string): void {
  const bad = facts.findIndex((f) => f.failure);
  if (bad >= 0) throw new NcclNodeError(facts[bad]!.failure!.code, `${what}: rank ${bad} failed: ${facts[bad]!.failure!.message}`, { rank: bad });
}
