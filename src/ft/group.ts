/**
 * An elastic process group: the communicator of the current generation, re-formed
 * in-process among whoever is alive (membership.ts) without restarting anything.
 * Each generation's Gloo communicator finds its peers under its own store prefix,
 * so the keys of a broken generation never mix with the next one's.
 *
 * The group owns the store connection (and, without a launcher, rank 0's store
 * server), not its communicators: aborting a broken communicator leaves the store up
 * for the round that replaces it. The store must outlive any rank that can fail; under
 * `nccl-node run` the launcher hosts it.
 *
 * Joiners (a restarted rank, a spare) register in the store's pending list; the closer
 * of the next round admits them (membership.ts onClose), so spares are taken in both
 * when the group grows at a step boundary and when it re-forms after a failure.
 *
 * On NCCL, a generation whose members all come from the previous one (a shrink, or the
 * same members after a transient fault) is made with ncclCommShrink from the previous
 * communicator, with NCCL_SHRINK_ABORT when a fault broke it, where every member's
 * library has it; otherwise (joiners, a spare, an aborted communicator, NCCL < 2.27)
 * with ncclCommInitRank under the generation's prefix. Each member says in the round
 * whether it can shrink, so all take the same path. `formation` records which.
 *
 * Under `nccl-node run` every member heartbeats (src/comm/heartbeat.ts) so the
 * launcher can tell a stopped process from a busy one, and a rank the launcher
 * restarted alone (--restart-scope rank, NCCL_NODE_FT_REJOIN=1) joins from start(),
 * so one training script serves both its first life and the later ones. A spare worker
 * of `nccl-node run --spares` (NCCL_NODE_FT_SPARE=1) joins from start() as a spare and,
 * once admitted, carries on as the RANK it replaced (src/launch/spares.ts).
 *
 * A re-formation does not wait for members known to be gone (gone.ts): each member's
 * round record carries its RANK, life and pid, and what it knows of the others. A
 * member that checks in after its round closed (it was reported gone by mistake, or
 * noticed the fault late) registers as a joiner and comes back at the next step
 * boundary.
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { Communicator } from '../comm/communicator.js';
import { openStore, DEFAULT_TIMEOUT_MS } from '../comm/init.js';
import { NcclNodeError } from '../errors.js';
import { resolveJobEnv } from '../launch/env.js';
import { announceJoin } from '../launch/join.js';
import { RANK_RESTART_COUNT_ENV, REJOIN_ENV } from '../launch/rank-process.js';
import { memberTookKey, SPARE_ENV, SPARE_INDEX_ENV, spareReadyKey, spareTakes, spareTookKey } from '../launch/spares.js';
import { startFailureDetection, stopFailureDetection } from '../comm/heartbeat.js';
import { binding } from '../native.js';
import { createNcclComm } from '../comm/nccl/nccl-init.js';
import type { StoreClient } from '../rendezvous/client.js';
import type { HostedStore } from '../rendezvous/store-thread.js';
import { FT_PREFIX, genKey, membershipRound, type Member, type MemberInfo, type RoundResult } from './membership.js';
import { goneByCause, goneNow, HOST_KEY } from './gone.js';
import { EXIT_FULL_RESTART } from './ladder.js';
import { loadGlooTuning } from '../comm/gloo/tuning.js';

export interface ElasticGroupOptions {
  /** How long a membership round waits for missing members, in ms (default 2000). */
  windowMs?: number;
  /** Deadline of each collective of a generation's communicator (default NCCL_NODE_TIMEOUT_MS or 10 min). */
  timeoutMs?: number;
  /** How long a joiner waits to be admitted (default timeoutMs). */
  admitTimeoutMs?: number;
  /**
   * 'gloo' (default), or 'nccl': a generation is shrunk from the previous NCCL
   * communicator (ncclCommShrink) when its members all come from it, else a fresh one
   * (ncclCommInitRank under the generation's prefix); docs/fault-tolerance.md.
   */
  backend?: 'gloo' | 'nccl';
}

/** How a generation's communicator was made, and what that took (ms). */
export interface Formation {
  via: 'ncclCommShrink' | 'init';
  ms: number;
  /** ncclCommShrink: with NCCL_SHRINK_ABORT (a fault had broken the communicator). */
  abort?: boolean;
}

interface StoreHandle {
  client: StoreClient;
  server?: HostedStore | undefined;
  host: string;
  port: number;
  token: string;
}

const PENDING = `${FT_PREFIX}pending`;
const ADMITTED = `${FT_PREFIX}admitted`;
const SPARES = `${FT_PREFIX}spares`;
const SPARES_ADMITTED = `${FT_PREFIX}spares-admitted`;

export class ElasticGroup {
  comm!: Communicator;
  generation = -1;
  members: Member[] = [];
  /** The last round this process took part in. */
  lastRound!: RoundResult;
  /** How the current generation's communicator was made. */
  formation: Formation = { via: 'init', ms: 0 };
  readonly id = `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  readonly windowMs: number;
  readonly timeoutMs: number;
  #store: StoreHandle;
  #ticket = 0;
  readonly #backend: 'gloo' | 'nccl';
  readonly #localRank: number;
  readonly #admitTimeoutMs: number;
  /** What every round record of this process carries besides id, rank and step. */
  #self: Pick<MemberInfo, 'founding' | 'life' | 'pid' | 'host'>;
  readonly #launcher = process.env['NCCL_NODE_LAUNCHER'] === '1';

  private constructor(store: StoreHandle, o: ElasticGroupOptions, job: { localRank: number; rank: number }) {
    this.#store = store;
    const localRank = job.localRank;
    this.#admitTimeoutMs = o.admitTimeoutMs ?? o.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#self = {
      founding: job.rank,
      life: Number(process.env[RANK_RESTART_COUNT_ENV] ?? '0') || 0,
      pid: process.pid,
      ...(HOST_KEY !== undefined ? { host: HOST_KEY } : {}),
    };
    this.#backend = o.backend ?? 'gloo';
    this.#localRank = localRank;
    this.windowMs = o.windowMs ?? 2000;
    this.timeoutMs = o.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  }

  /** The launcher's RANK this process holds (a spare: the one it took; negative while it waits) and its life. */
  get launcherRank(): { rank: number; life: number } {
    return { rank: this.#self.founding ?? -1, life: this.#self.life ?? 0 };
  }

  get store(): StoreClient {
    return this.#store.client;
  }

  /**
   * The founding members (RANK / WORLD_SIZE from the environment, as init()) form
   * generation 0; a rank the launcher restarted alone joins the running group instead.
   */
  static async start(o: ElasticGroupOptions = {}): Promise<ElasticGroup> {
    if (process.env[REJOIN_ENV] === '1') return ElasticGroup.join(o);
    if (process.env[SPARE_ENV] === '1') return ElasticGroup.#launcherSpare(o);
    const job = resolveJobEnv(process.env, {});
    if (job.token === undefined) throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'ElasticGroup.start: no job token; set NCCL_NODE_TOKEN or start the job with nccl-node run');
    const timeoutMs = o.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const g = new ElasticGroup(await openStore(job, job.token, timeoutMs), o, job);
    // As init(): a launcher fails ranks that never announce themselves.
    await announceJoin(g.store, { rank: job.rank, pid: process.pid, host: hostname(), localRank: job.localRank });
    startFailureDetection(g.store, job.rank);
    // Generation 0 waits for the whole founding world (startup is slow), not one window.
    await g.#form(0, { id: g.id, prevRank: job.rank, step: 0 }, job.worldSize, timeoutMs);
    return g;
  }

  /**
   * A process that is not in the group yet: registers, waits to be admitted, joins that
   * generation. A joiner is taken in at the next step boundary (the group grows); with
   * `spare: true` it waits until a round comes up short and takes a lost member's place.
   */
  static async join(o: ElasticGroupOptions & { spare?: boolean } = {}): Promise<ElasticGroup> {
    const job = resolveJobEnv(process.env, {});
    if (job.token === undefined) throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'ElasticGroup.join: no job token; set NCCL_NODE_TOKEN or start the job with nccl-node run');
    const timeoutMs = o.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    // Never host the store: the group already has one.
    const g = new ElasticGroup(await openStore({ ...job, rank: 1, worldSize: Math.max(2, job.worldSize) }, job.token, timeoutMs), o, job);
    if (process.env['NCCL_NODE_LAUNCHER'] === '1') {
      // A restarted rank: its launcher's join record and heartbeats now name this process.
      await announceJoin(g.store, { rank: job.rank, pid: process.pid, host: hostname(), localRank: job.localRank });
      startFailureDetection(g.store, job.rank);
    }
    await g.#enter(o.spare ? SPARES : PENDING, -1);
    return g;
  }

  /**
   * A launcher's spare: registers (negative RANK, so no lost RANK is matched to it), says
   * it is ready, and once admitted takes on the RANK it replaced: announces and
   * heartbeats as it and tells its launcher (`took`).
   */
  static async #launcherSpare(o: ElasticGroupOptions): Promise<ElasticGroup> {
    // Its RANK and LOCAL_RANK lie past the world's (LOCAL_RANK picks its own device): read the job without them.
    const job = resolveJobEnv(process.env, { rank: 0, localRank: 0 });
    if (job.token === undefined) throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'ElasticGroup.start: no job token for the spare; start the job with nccl-node run');
    const index = Number(process.env[SPARE_INDEX_ENV] ?? '0');
    const node = Number(process.env['GROUP_RANK'] ?? '0');
    const localRank = Number(process.env['LOCAL_RANK'] ?? '0');
    const timeoutMs = o.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const g = new ElasticGroup(await openStore({ ...job, rank: 1, worldSize: Math.max(2, job.worldSize) }, job.token, timeoutMs), o, { localRank, rank: -1 - index });
    await g.#enter(SPARES, -1, () => g.store.set(spareReadyKey(node, index), String(process.pid)));
    // A lost member that was itself a spare is listed under its spare RANK; it recorded the RANK it took.
    const listed = JSON.parse(await g.store.getString(genKey(g.generation - 1, 'members'), { timeoutMs })) as Member[];
    const prev = await Promise.all(listed.map(async (m) => {
      if ((m.founding ?? 0) >= 0 || !(await g.store.check(memberTookKey(m.id)))) return m;
      const t = JSON.parse(await g.store.getString(memberTookKey(m.id))) as { rank: number; life: number };
      return { ...m, founding: t.rank, life: t.life };
    }));
    const took = spareTakes(prev, g.members, g.id);
    if (took !== undefined) {
      await g.store.set(memberTookKey(g.id), JSON.stringify(took));
      g.#self = { ...g.#self, founding: took.rank, life: took.life };
      await announceJoin(g.store, { rank: took.rank, pid: process.pid, host: hostname(), localRank });
      startFailureDetection(g.store, took.rank);
      await g.store.set(spareTookKey(node, index), JSON.stringify({ ...took, pid: process.pid }));
    }
    return g;
  }

  /** Registers in a joiner list, waits to be admitted, forms the generation it is admitted to. */
  async #enter(list: string, step: number, registered?: () => Promise<void>): Promise<void> {
    this.#ticket = Number(await this.store.add(list, 1));
    await this.store.set(`${list}/${this.#ticket}`, this.id);
    await registered?.();
    const admit = JSON.parse(await this.store.getString(`${list}/${this.#ticket}/admit`, { timeoutMs: this.#admitTimeoutMs })) as { generation: number; expected: number };
    await this.#form(admit.generation, { id: this.id, prevRank: -1, step }, admit.expected, this.windowMs);
  }

  /** Joiners registered and not admitted yet (reads two counters; any member may ask). */
  async pendingJoiners(): Promise<number> {
    return Number(await this.store.add(PENDING, 0)) - Number(await this.store.add(ADMITTED, 0));
  }

  /**
   * Leaves the current generation and forms the next with whoever checks in within the
   * window, plus any pending joiners. The communicator is aborted first (peers stuck in
   * a collective with this rank fail at once) unless this rank offers to shrink it: an
   * NCCL communicator ncclCommShrink can still use stays up through the round, and a
   * survivor that has not seen the fault yet comes in when its own deadline fires.
   * `cause` (the error that broke the step) may name a member that is gone; the round
   * does not wait for such members. Checking in after the round closed, this process
   * joins the group as a joiner instead (admitted at the next step boundary).
   */
  async reform(step: number, cause?: unknown): Promise<RoundResult> {
    const prev = this.members.find((m) => m.id === this.id)!;
    const size = this.comm.size;
    const shrink = this.#backend === 'nccl' && this.comm.supportsShrink ? { gen: this.generation, size } : undefined;
    if (!shrink) this.comm.abort();
    const lost = new Set([...goneByCause(this.members, cause), ...await goneNow(this.store, this.members, this.id, this.#launcher)]);
    try {
      await this.#form(this.generation + 1, { id: this.id, prevRank: prev.rank, step, shrink, lost: [...lost] }, size, this.windowMs);
    } catch (err) {
      if (!(err instanceof NcclNodeError && err.details.late === true)) throw err;
      try {
        await this.#enter(PENDING, step);
      } catch (e) {
        // Not taken back (the others finished, or stopped taking joiners): only the gang path is left.
        throw new NcclNodeError('ERR_UNAVAILABLE', `generation ${this.generation + 1} closed without this member and it was not admitted to a later one: ${(e as Error).message}`, { exitCode: EXIT_FULL_RESTART });
      }
    }
    return this.lastRound;
  }

  async close(): Promise<void> {
    await this.comm?.destroy().catch(() => {});
    // A last beat says this rank is done with its communicators (before the store goes).
    await stopFailureDetection();
    await this.#store.client.close().catch(() => {});
    await this.#store.server?.close().catch(() => {});
  }

  async #form(generation: number, info: Pick<MemberInfo, 'id' | 'prevRank' | 'step' | 'lost' | 'shrink'>, expected: number, windowMs: number): Promise<void> {
    const previous = this.members;
    const round = await membershipRound(this.store, generation, { ...info, ...this.#self }, {
      expected,
      windowMs,
      // Only a member of the previous generation knows its members (joiners never close a round).
      ...(info.prevRank >= 0 ? { probeLost: () => goneNow(this.store, previous, this.id, this.#launcher) } : {}),
      // Generation 0 is the founding world; joiners come in at later rounds.
      ...(generation > 0 ? {
        onClose: () => this.#admit(PENDING, ADMITTED, Infinity, generation, expected),
        onShort: (missing: number) => this.#admit(SPARES, SPARES_ADMITTED, missing, generation, expected),
      } : {}),
    });
    const t0 = performance.now();
    const old = generation > 0 ? this.comm : undefined;
    const exclude = old ? shrinkExclude(round.members, generation, old.size) : undefined;
    if (old && exclude) {
      let comm: Communicator;
      const abort = old.state !== 'ok';
      try {
        comm = await old.shrink(exclude, { abort, timeoutMs: this.timeoutMs });
      } finally {
        old.abort();  // its work is over either way; a failed shrink leaves a retry to init
      }
      if (comm.rank !== round.me.rank || comm.size !== round.members.length) {
        comm.abort();
        throw new NcclNodeError('ERR_BACKEND', `generation ${generation}: ncclCommShrink made rank ${comm.rank} of ${comm.size}, the round rank ${round.me.rank} of ${round.members.length}`);
      }
      this.#adopt(comm, round, { via: 'ncclCommShrink', ms: performance.now() - t0, abort });
      return;
    }
    old?.abort();
    const native = this.#backend === 'nccl'
      ? await createNcclComm(binding(), {
        rank: round.me.rank, worldSize: round.members.length, localRank: this.#localRank,
        storeHost: this.#store.host, storePort: this.#store.port, token: this.#store.token,
        timeoutMs: this.timeoutMs, prefix: genKey(generation, 'nccl/'),
        // A fault leaves the communicator for the next generation's ncclCommShrink.
        keepOnFault: true,
      })
      : await binding().createGloo({
      rank: round.me.rank,
      size: round.members.length,
      storeHost: this.#store.host,
      storePort: this.#store.port,
      token: this.#store.token,
      prefix: genKey(generation, 'gloo/'),
      hostname: this.store.localAddress ?? '127.0.0.1',
      timeoutMs: this.timeoutMs,
      checkAgreement: true,
      tuning: loadGlooTuning(),
    });
    this.#adopt(new Communicator({ native, timeoutMs: this.timeoutMs }), round, { via: 'init', ms: performance.now() - t0 });
  }

  #adopt(comm: Communicator, round: RoundResult, formation: Formation): void {
    this.comm = comm;
    this.generation = round.generation;
    this.members = round.members;
    this.lastRound = round;
    this.formation = formation;
  }

  /** The closer's part: admit up to `most` of the registered joiners (or spares) to `generation`; returns how many. */
  async #admit(list: string, admittedKey: string, most: number, generation: number, expected: number): Promise<number> {
    const registered = Number(await this.store.add(list, 0));
    const admitted = Number(await this.store.add(admittedKey, 0));
    const n = Math.min(most, registered - admitted);
    if (n <= 0) return 0;
    await this.store.add(admittedKey, n);
    for (let t = admitted + 1; t <= admitted + n; t++) {
      await this.store.set(`${list}/${t}/admit`, JSON.stringify({ generation, expected }));
    }
    return n;
  }
}

/**
 * The previous ranks to exclude when every member of `generation` can shrink the
 * communicator of generation - 1 (size `size`) into it; undefined when some member
 * cannot (a joiner, a spare, an aborted communicator, an older library). Every member
 * computes the same answer from the same list.
 */
export function shrinkExclude(members: Member[], generation: number, size: number): number[] | undefined {
  const ok = members.every((m) => m.prevRank >= 0 && m.shrink?.gen === generation - 1 && m.shrink.size === size);
  if (!ok || members.length > size) return undefined;
  const kept = new Set(members.map((m) => m.prevRank));
  return Array.from({ length: size }, (_, r) => r).filter((r) => !kept.has(r));
}
