/**
 * In-memory checkpoints (as CheckFreq, Gemini, NVIDIA's local checkpointing): each
 * rank keeps its newest snapshot (the state dict the durable Checkpointer saves) in
 * host memory, and a replica of it on a peer on another node. After a failure,
 * restore() takes every rank's state from its own memory if its process survived,
 * else from the peer's replica, else from the durable checkpoint, and all ranks
 * restore the same step. See docs/checkpoint.md, "In-memory checkpoints".
 */
import type { Communicator } from '../comm/communicator.js';
import { NcclNodeError } from '../errors.js';
import { latest } from './layout.js';
import { load, type LoadResult } from './load.js';
import { readManifest } from './manifest.js';
import { checkFrame, covers, fillFrame, fillTargets, planFrame, readFrame, type FrameMeta, type FramePlan } from './in-memory-frame.js';
import { failureOf, gatherSmall, holders, planRestore, sizeOf, throwIfFailed, type Failure, type HeldEntry, type Inventory, type Placement, type RestorePlan, type Source } from './in-memory-plan.js';
import type { loadTraining } from './runtime.js';
import type { CheckpointState, RunMetadata, TrainState } from './state.js';

export interface InMemoryOptions {
  /** Most host bytes this rank may hold (own snapshot + the replicas it keeps); default unlimited. */
  budgetBytes?: number;
  /** A snapshot over budget: 'throw' (default; ERR_UNAVAILABLE with details.overBudget) or 'skip' (a warning). */
  overBudget?: 'throw' | 'skip';
  /** This rank's node; default GROUP_RANK, else rank / local world size. */
  node?: number;
  /** Deadline of each exchange (default: the communicator's). */
  timeoutMs?: number;
}

export interface HeldBytes {
  /** Step of the own snapshot (null: none). */
  step: number | null;
  own: number;
  replicas: number;
  total: number;
  budgetBytes: number;
}

export interface SnapshotResult {
  taken: boolean;
  step: number;
  /** The rank that keeps this rank's replica (-1: none, a world of one). */
  holder: number;
  /** Wall time of the whole collective step (copy, digest, exchange). */
  seconds: number;
  held: HeldBytes;
  /** Why it was skipped (overBudget: 'skip'). */
  reason?: string;
}

export interface RestoreResult {
  step: number;
  /** Where this rank's state came from. */
  source: Source;
  /** Every rank's source, in rank order. */
  sources: Source[];
  train: TrainState;
  metadata: RunMetadata;
  /** The durable checkpoint loaded ('disk'). */
  dir?: string;
  /** Copies that failed their digest and were not used. */
  rejected: RestorePlan['rejected'];
  seconds: number;
}

/** What restore() fills: DDP/FSDP (or anything with the same loadStateDict). */
export type Restorable = Parameters<typeof loadTraining>[1];

interface Copy {
  frame: Uint8Array;
  meta: FrameMeta;
}

export class InMemoryCheckpoint {
  readonly #o: InMemoryOptions;
  #own: Copy | null = null;
  /** Replicas this rank keeps, by owner rank. */
  #replicas = new Map<number, Copy>();

  constructor(options: InMemoryOptions = {}) {
    const b = options.budgetBytes;
    if (b !== undefined && !(Number.isFinite(b) && b >= 0)) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `InMemoryCheckpoint: budgetBytes must be a non-negative number of bytes, received ${b}`);
    }
    if (options.overBudget !== undefined && options.overBudget !== 'throw' && options.overBudget !== 'skip') {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `InMemoryCheckpoint: overBudget must be 'throw' or 'skip', received ${String(options.overBudget)}`);
    }
    this.#o = options;
  }

  /** Host bytes held now: own snapshot plus replicas kept for peers. */
  held(): HeldBytes {
    const own = this.#own?.frame.byteLength ?? 0;
    const replicas = [...this.#replicas.values()].reduce((a, c) => a + c.frame.byteLength, 0);
    return { step: this.#own?.meta.step ?? null, own, replicas, total: own + replicas, budgetBytes: this.#o.budgetBytes ?? Infinity };
  }

  /** The frames held (own, and replicas by owner): for inspection; changing a byte makes its digest fail. */
  frames(): { own: Uint8Array | null; replicas: Map<number, Uint8Array> } {
    return { own: this.#own?.frame ?? null, replicas: new Map([...this.#replicas].map(([k, c]) => [k, c.frame])) };
  }

  /** Drops everything held. */
  clear(): void {
    this.#own = null;
    this.#replicas.clear();
  }

  /**
   * Collective: every rank calls it at the same step. Copies `state` into host
   * memory, seals it with its CRC32C, and swaps copies with the peers: this rank's
   * goes to its holder on the next node, the ranks it holds for send theirs here.
   * The budget is checked on every rank before anything is copied; one rank over it
   * refuses (or skips) the snapshot on all. The previous snapshot is released once
   * the new one is complete, so during the call both are held.
   */
  async snapshot(comm: Communicator, state: CheckpointState): Promise<SnapshotResult> {
    const t0 = performance.now();
    this.#gloo(comm, 'snapshot');
    // A rank that cannot take part says why in the exchange, so the others fail with it instead of waiting.
    let plan: FramePlan | null = null;
    let fact: { step: number; bytes: number; place: Placement; failure?: Failure };
    try {
      plan = planFrame(state, comm.rank, comm.size);
      fact = { step: plan.meta.step, bytes: plan.totalBytes, place: this.#place(comm) };
    } catch (err) {
      fact = { step: -1, bytes: 0, place: { node: 0, localRank: 0 }, failure: failureOf(err) };
    }
    const facts = await gatherSmall(comm, fact, this.#o.timeoutMs);
    throwIfFailed(facts, 'in-memory snapshot');
    if (!plan) throw new Error('unreachable: this rank failed and said so');
    const steps = [...new Set(facts.map((f) => f.step))];
    if (steps.length > 1) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `in-memory snapshot: ranks called it at different steps (${facts.map((f, r) => `rank ${r}: ${f.step}`).join(', ')})`);
    }
    const holder = holders(facts.map((f) => f.place));
    const keeps = holder.flatMap((h, owner) => (h === comm.rank ? [owner] : []));
    const budget = this.#o.budgetBytes ?? Infinity;
    const need = facts.map((f, r) => f.bytes + holder.reduce((a, h, owner) => a + (h === r ? facts[owner]!.bytes : 0), 0));
    const over = need.findIndex((n) => n > budget);
    if (over >= 0) {
      const reason = `in-memory snapshot of step ${plan.meta.step} over budget: rank ${over} would hold ${need[over]} bytes ` +
        `(own ${facts[over]!.bytes} + replicas ${need[over]! - facts[over]!.bytes}), its budget is ${budget}; this rank would hold ${need[comm.rank]}`;
      if (this.#o.overBudget !== 'skip') throw new NcclNodeError('ERR_UNAVAILABLE', reason, { overBudget: true, rank: over, neededBytes: need[over], budgetBytes: budget, thisRankBytes: need[comm.rank] });
      process.emitWarning(reason, { code: 'NCCL_NODE_INMEMORY_OVER_BUDGET' });
      return { taken: false, step: plan.meta.step, holder: holder[comm.rank]!, seconds: (performance.now() - t0) / 1000, held: this.held(), reason };
    }
    const frame = await fillFrame(plan, state);
    const incoming = keeps.map((owner) => ({ owner, frame: new Uint8Array(facts[owner]!.bytes) }));
    const mine = holder[comm.rank]!;
    await Promise.all([
      ...(mine >= 0 ? [comm.send(frame, mine, { timeoutMs: this.#o.timeoutMs })] : []),
      ...incoming.map((i) => comm.recv(i.frame, i.owner, { timeoutMs: this.#o.timeoutMs })),
    ]);
    this.#own = { frame, meta: plan.meta };
    this.#replicas = new Map(incoming.map((i) => [i.owner, { frame: i.frame, meta: metaOf(i.frame) }]));
    return { taken: true, step: plan.meta.step, holder: mine, seconds: (performance.now() - t0) / 1000, held: this.held() };
  }

  /**
   * Collective on the (new) communicator, every rank with the world size of the
   * snapshots: a survivor brings what it holds, a replacement process an empty
   * InMemoryCheckpoint. Every rank verifies the digests of what it holds; the ranks
   * agree on one step (planRestore, from the all-gathered inventories): the newest
   * every rank can restore from its own copy or a peer's replica, unless `durable`
   * (a Checkpointer root) holds a newer one; with none, the durable checkpoint. The
   * holders send the replicas, the receivers check them again (a failure there sends
   * every rank to the durable checkpoint), dp is filled, and the copies a
   * replacement lost are sent to it again so the next failure is covered too.
   */
  async restore(comm: Communicator, dp: Restorable, options: { durable?: string } = {}): Promise<RestoreResult> {
    const t0 = performance.now();
    this.#gloo(comm, 'restore');
    const timeoutMs = this.#o.timeoutMs;
    let mine: Inventory & { failure?: Failure };
    try {
      let durable: Inventory['durable'] = null;
      if (comm.rank === 0 && options.durable) {
        const dir = await latest(options.durable);
        durable = dir ? { dir, step: (await readManifest(dir)).step } : null;
      }
      mine = {
        rank: comm.rank, place: this.#place(comm), own: entry(this.#own), replicas: [...this.#replicas.values()].map(entry).filter((e): e is HeldEntry => e !== null),
        ...(comm.rank === 0 ? { durable } : {}),
      };
    } catch (err) {
      mine = { rank: comm.rank, place: { node: 0, localRank: 0 }, own: null, replicas: [], failure: failureOf(err) };
    }
    const inv = await gatherSmall(comm, mine, timeoutMs);
    throwIfFailed(inv, 'in-memory restore');
    const plan = planRestore(inv);
    if (plan.kind === 'none') throw this.#nothing(plan.rejected, options.durable);
    let received: Copy | null = null;
    let error = '';
    if (plan.kind === 'memory') {
      const { from, step } = plan;
      const want = from[comm.rank]!;
      const buf = want >= 0 ? new Uint8Array(sizeOf(inv, comm.rank, step)) : null;
      await Promise.all([
        ...from.flatMap((h, r) => (h === comm.rank ? [comm.send(this.#replicas.get(r)!.frame, r, { timeoutMs })] : [])),
        ...(buf ? [comm.recv(buf, want, { timeoutMs })] : []),
      ]);
      if (buf) {
        try {
          const meta = readFrame(buf, `replica of rank ${comm.rank} from rank ${want}`);
          if (meta.step !== step || meta.owner !== comm.rank) error = `replica from rank ${want} holds rank ${meta.owner} step ${meta.step}, wanted rank ${comm.rank} step ${step}`;
          received = { frame: buf, meta };
        } catch (err) {
          error = (err as Error).message;
        }
      }
    }
    const own = received ?? this.#own;
    // One round inside the fill agrees on the received copies (and on whether a rank needs
    // the others' pieces): a copy that failed its check anywhere sends every rank to disk.
    let disk: LoadResult | null = null;
    const rejected = [...plan.rejected];
    await dp.loadStateDict(async (targets) => {
      const local = plan.kind === 'memory' && covers(targets, [own!]);
      const agreed = plan.kind === 'memory' ? await gatherSmall(comm, { error, local }, timeoutMs) : [];
      const bad = agreed.findIndex((a) => a.error !== '');
      if (bad >= 0) rejected.push({ holder: plan.from[bad]!, owner: bad, step: plan.step, error: agreed[bad]!.error });
      if (plan.kind === 'disk' || bad >= 0) {
        if (!plan.durable) throw this.#nothing(rejected, options.durable);
        disk = await load(plan.durable.dir, targets);
        return { optimizerStep: optimizerStepOf(disk.train, disk.dir) };
      }
      let frames: Copy[] = [own!];
      if (!agreed.every((a) => a.local)) frames = await this.#gatherFrames(comm, own!, inv, plan.step);
      await fillTargets(targets, frames);
      return { optimizerStep: optimizerStepOf(own!.meta.train, `in-memory snapshot of step ${plan.step}`) };
    });
    const seconds = () => (performance.now() - t0) / 1000;
    if (disk) {
      // Copies older than the durable step, or incomplete across ranks, must not be restored later.
      this.clear();
      const r: LoadResult = disk;
      return { step: r.step, source: 'disk', sources: inv.map(() => 'disk'), train: { ...r.train, step: r.step }, metadata: r.metadata, dir: r.dir, rejected, seconds: seconds() };
    }
    this.#own = own;
    for (const [owner, c] of this.#replicas) if (c.meta.step !== plan.step) this.#replicas.delete(owner);
    await this.#rereplicate(comm, inv, plan.step);
    return {
      step: plan.step, source: received ? 'peer' : 'memory', sources: plan.from.map((h) => (h < 0 ? 'memory' : 'peer')),
      train: structuredClone(own!.meta.train), metadata: structuredClone(own!.meta.metadata), rejected, seconds: seconds(),
    };
  }

  #nothing(rejected: RestorePlan['rejected'], durable: string | undefined): NcclNodeError {
    this.clear();
    const why = rejected.map((r) => `rank ${r.holder}'s copy of rank ${r.owner}: ${r.error}`).join('; ');
    return new NcclNodeError('ERR_UNAVAILABLE', `in-memory restore: no step every rank can restore from memory and no durable checkpoint` +
      `${durable ? ` in ${durable}` : ' (no durable root given)'}${why ? `; rejected: ${why}` : ''}`, { rejected });
  }

  /** Every rank's copy of `step` on every rank (DDP reads every tensor whole): one all-gather, padded to the largest. */
  async #gatherFrames(comm: Communicator, own: Copy, inv: Inventory[], step: number): Promise<Copy[]> {
    const sizes = inv.map((_, r) => sizeOf(inv, r, step));
    const width = Math.max(...sizes);
    const send = new Uint8Array(width);
    send.set(own.frame);
    const all = new Uint8Array(width * comm.size);
    await comm.allGather(send, all, { timeoutMs: this.#o.timeoutMs });
    return sizes.map((n, r) => {
      const frame = all.subarray(r * width, r * width + n);
      return { frame, meta: r === comm.rank ? own.meta : readFrame(frame, `snapshot of rank ${r}`) };
    });
  }

  /** Owners whose holder (in the new layout) lacks their replica of `step` send it again. */
  async #rereplicate(comm: Communicator, inv: Inventory[], step: number): Promise<void> {
    const holder = holders(inv.map((i) => i.place));
    const has = (h: number, owner: number) => inv[h]!.replicas.some((e) => e.owner === owner && e.step === step && e.ok);
    const missing = holder.flatMap((h, owner) => (h >= 0 && !has(h, owner) ? [owner] : []));
    if (missing.length === 0) return;
    const incoming = missing.filter((owner) => holder[owner] === comm.rank).map((owner) => ({ owner, frame: new Uint8Array(sizeOf(inv, owner, step)) }));
    await Promise.all([
      ...(missing.includes(comm.rank) ? [comm.send(this.#own!.frame, holder[comm.rank]!, { timeoutMs: this.#o.timeoutMs })] : []),
      ...incoming.map((i) => comm.recv(i.frame, i.owner, { timeoutMs: this.#o.timeoutMs })),
    ]);
    for (const i of incoming) this.#replicas.set(i.owner, { frame: i.frame, meta: metaOf(i.frame) });
  }

  #place(comm: Communicator): Placement {
    const env = process.env.GROUP_RANK;
    const node = this.#o.node ?? (env !== undefined && env !== '' ? Number(env) : Math.floor(comm.rank / Math.max(1, comm.localSize)));
    if (!Number.isInteger(node) || node < 0) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `in-memory checkpoint: node must be a non-negative integer (GROUP_RANK), received ${node}`);
    return { node, localRank: comm.localRank };
  }

  /** The frames travel as host bytes: a Gloo communicator (NCCL's send/recv take device memory). */
  #gloo(comm: Communicator, call: string): void {
    if (comm.backend === 'nccl') {
      throw new NcclNodeError('ERR_UNAVAILABLE', `in-memory ${call}: the snapshot exchange sends host bytes and needs a Gloo communicator; this one is NCCL`);
    }
  }
}

function optimizerStepOf(train: Record<string, unknown>, what: string): number {
  const s = train.optimizerStep;
  if (typeof s !== 'number') throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${what}: train state has no optimizerStep (not made with trainingState())`);
  return s;
}

/** A held copy as its holder reports it, digest checked now. */
function entry(c: Copy | null): HeldEntry | null {
  if (!c) return null;
  const check = checkFrame(c.frame);
  return {
    owner: c.meta.owner, world: c.meta.world, step: c.meta.step, bytes: c.frame.byteLength, ok: check.ok,
    ...(check.ok ? {} : { error: `CRC32C ${check.actual.toString(16)} does not match the stored ${check.stored.toString(16)}` }),
  };
}

/** A received replica's meta; a replica damaged in transit is kept and rejected when a restore checks it. */
function metaOf(frame: Uint8Array): FrameMeta {
  try {
    return readFrame(frame, 'replica');
  } catch {
    return { owner: -1, world: 0, step: -1, pieces: [], train: { step: -1 }, metadata: {} };
  }
}
