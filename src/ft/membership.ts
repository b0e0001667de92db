/**
 * Who is alive: a bounded-time membership round through the job's store, keyed by a
 * generation number. Every process that wants to be in generation g checks in by
 * incrementing the round's counter (its ticket) and writing what it brings (its
 * previous rank, the step it has committed). The first to check in closes the round:
 * it waits until the expected number checked in or the window ran out, then adds
 * CLOSED to the counter in one atomic step, so exactly the tickets below CLOSED are
 * in and a late arrival learns so from its own ticket. The closer publishes the list;
 * everyone else waits for it with a deadline. A process that did not check in within
 * the window is out of generation g (it may join a later one).
 *
 * A member that is known to be gone (gone.ts) never checks in, so waiting the window
 * for it is waste: each member reports in its record the previous ranks it knows are
 * gone, the closer adds what it learns itself while it waits (probeLost), and stops
 * waiting once those who checked in plus those reported gone (and not checked in)
 * make up the expected number. A member reported gone by mistake that checks in
 * before the close is simply in; one that checks in after it is late, as any other.
 *
 * The store has no compare-and-set; the counter's add() is the one atomic operation
 * the round needs.
 */
import { NcclNodeError } from '../errors.js';
import type { StoreClient } from '../rendezvous/client.js';

/** Added by the closer; tickets are far below it. */
const CLOSED = 1_000_000_000;
const POLL_MS = 5;
/** How often the closer asks probeLost (it may read the store once per previous member). */
const PROBE_MS = 25;

export const FT_PREFIX = 'nccl-node/ft/';

export interface MemberInfo {
  /** Stable for the life of the process (host:pid:random). */
  id: string;
  /** Rank in the previous generation; -1 for a joiner. */
  prevRank: number;
  /** Steps this process has committed (-1: no state yet, a joiner). */
  step: number;
  /**
   * The communicator this member could shrink into the next one (NCCL with
   * ncclCommShrink, not aborted): its generation and size. Absent: it cannot.
   */
  shrink?: { gen: number; size: number } | undefined;
  /** Previous-generation ranks this process knows are gone (they will not check in). */
  lost?: number[];
  /** The launcher's RANK of this process (fixed for the job), and its life (restarts of that RANK). */
  founding?: number;
  life?: number;
  /** Process id and machine (gone.ts HOST_KEY): a member on the same machine can tell whether it exited. */
  pid?: number;
  host?: string;
}

export interface Member extends MemberInfo {
  ticket: number;
  /** Rank in the new generation. */
  rank: number;
}

export interface RoundOptions {
  /** The closer stops waiting once this many checked in. */
  expected: number;
  /** How long the closer waits for the expected members, in ms. */
  windowMs: number;
  /** Called by the closer before it waits (admits pending joiners); returns how many more to expect. */
  onClose?: () => Promise<number>;
  /**
   * Called by the closer when the window ran out `missing` short (admits spares in
   * their place); returns how many more to expect, given one more window to check in.
   */
  onShort?: (missing: number) => Promise<number>;
  /** Called by the closer now and then while it waits: previous ranks it has learnt are gone. */
  probeLost?: () => Promise<number[]>;
}

export interface RoundResult {
  generation: number;
  members: Member[];
  me: Member;
  /** This process closed the round. */
  closer: boolean;
  ms: number;
}

export function genKey(generation: number, key: string): string {
  return `${FT_PREFIX}gen/${generation}/${key}`;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * New ranks: the previous members in their old order, then joiners by arrival, so a
 * shrink keeps the survivors' relative order (and the data slices they take).
 */
export function orderMembers(list: (MemberInfo & { ticket: number })[]): Member[] {
  const sorted = [...list].sort((a, b) => {
    const pa = a.prevRank < 0 ? Infinity : a.prevRank;
    const pb = b.prevRank < 0 ? Infinity : b.prevRank;
    return pa !== pb ? pa - pb : a.ticket - b.ticket;
  });
  return sorted.map((m, rank) => ({ ...m, rank }));
}

export async function membershipRound(store: StoreClient, generation: number, info: MemberInfo, o: RoundOptions): Promise<RoundResult> {
  const t0 = performance.now();
  const seq = genKey(generation, 'seq');
  const ticket = Number(await store.add(seq, 1));
  const late = () => new NcclNodeError('ERR_TIMEOUT', `membership round of generation ${generation}: ${info.id} checked in after the round closed (window ${o.windowMs} ms)`, { generation, late: true });
  if (ticket > CLOSED) throw late();
  await store.set(genKey(generation, `member/${ticket}`), JSON.stringify(info));
  const closer = ticket === 1;
  if (closer) {
    let expected = o.expected + (o.onClose ? await o.onClose() : 0);
    const records = new Map<number, MemberInfo>();
    const lost = new Set<number>(info.lost ?? []);
    let probed = -Infinity;
    /** How many previous ranks are reported gone and have not checked in (n tickets taken). */
    const tally = async (n: number): Promise<number> => {
      for (let t = 1; t <= n; t++) {
        if (records.has(t)) continue;
        // Written right after the ticket was taken; a missing one is read on a later poll.
        const raw = await store.check(genKey(generation, `member/${t}`)).then((has) => (has ? store.getString(genKey(generation, `member/${t}`)) : undefined)).catch(() => undefined);
        if (raw === undefined) continue;
        const m = JSON.parse(raw) as MemberInfo;
        records.set(t, m);
        for (const r of m.lost ?? []) lost.add(r);
      }
      if (o.probeLost && performance.now() - probed >= PROBE_MS) {
        probed = performance.now();
        for (const r of await o.probeLost().catch(() => [])) lost.add(r);
      }
      // A ticket without its record may be a member reported gone checking in: counting
      // it and its report both would close the round one short of a live member.
      if (records.size < n) return 0;
      const inPrev = new Set([...records.values()].map((m) => m.prevRank));
      return [...lost].filter((r) => r >= 0 && !inPrev.has(r)).length;
    };
    const waitFor = async (deadline: number, countLost: boolean) => {
      let n = Number(await store.add(seq, 0));
      let gone = countLost ? await tally(n) : 0;
      while (performance.now() < deadline && n + gone < expected) {
        await sleep(POLL_MS);
        n = Number(await store.add(seq, 0));
        if (countLost && n < expected) gone = await tally(n);
      }
      return n;
    };
    const n0 = await waitFor(t0 + o.windowMs, true);
    if (n0 < expected && o.onShort) {
      // Short by members known gone (at once) or by the window: spares take their places.
      const spares = await o.onShort(expected - n0);
      // Spares wait on their admission key, so they check in well within one more window.
      if (spares > 0) {
        expected = n0 + spares;
        await waitFor(performance.now() + o.windowMs, false);
      }
    }
    const n = Number(await store.add(seq, CLOSED)) - CLOSED;
    const list: (MemberInfo & { ticket: number })[] = [];
    for (let t = 1; t <= n; t++) {
      // A member that died between its ticket and its record is out.
      const raw = await store.getString(genKey(generation, `member/${t}`), { timeoutMs: 1000 }).catch(() => undefined);
      if (raw !== undefined) list.push({ ...(JSON.parse(raw) as MemberInfo), ticket: t });
    }
    await store.set(genKey(generation, 'members'), JSON.stringify(orderMembers(list)));
  }
  let raw: string;
  try {
    raw = await store.getString(genKey(generation, 'members'), { timeoutMs: o.windowMs + 5000 });
  } catch (err) {
    throw new NcclNodeError('ERR_TIMEOUT', `membership round of generation ${generation}: no member list within ${o.windowMs + 5000} ms (the closing process died?): ${(err as Error).message}`, { generation });
  }
  const members = JSON.parse(raw) as Member[];
  const me = members.find((m) => m.id === info.id);
  if (!me) throw late();
  return { generation, members, me, closer, ms: performance.now() - t0 };
}
