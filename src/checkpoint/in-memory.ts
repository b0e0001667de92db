/**
 * In-memory checkpoints (as CheckFreq, Gemini, NVIDIA's local checkpointing): each
 * rank keeps its newest snapshot (the state dict the durable Checkpointer saves) in
 * host memory, and a replica of it on a peer on another node. After a failure,
 * restore() takes every rank's state from its own memory if its process survived,
 * else from the peer's replica, else from the durable checkpoint, and all ranks
 * restore the same step. With a job id (nccl-node run gives one) the frames live in
 * node-local memory-backed files (in-memory-files.ts), so they outlive the process:
 * a gang restart finds them on the same node. See docs/checkpoint.md, "In-memory checkpoints".
 */
import { rmSync } from 'node:fs';
import type { Communicator } from '../comm/communicator.js';
import { NcclNodeError } from '../errors.js';
import { latest } from './layout.js';
import { load, type LoadResult } from './load.js';
import { readManifest } from './manifest.js';
import { covers, fillFrame, fillTargets, planFrame, readFrame, type FramePlan } from './in-memory-frame.js';
import { resolveFiles, SnapshotFiles } from './in-memory-files.js';
import { entry, frameOf, loadCopies, metaOf, persist, type Copy } from './in-memory-local.js';
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
  /**
   * Node-local directory (a tmpfs) the frames live in, so a process restarted on this
   * node finds them: default NCCL_NODE_INMEMORY_DIR ('off': none), else /dev/shm;
   * false keeps them in process memory.
   */
  dir?: string | false;
  /** The job the files belong to: default NCCL_NODE_JOB_ID (nccl-node run sets it), else TORCHELASTIC_RUN_ID unless "none"; without one, process memory. */
  job?: string;
  /** Snapshot files of other jobs older than this are removed on first use (default 6 h). */
  staleAfterMs?: number;
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

export class InMemoryCheckpoint {
  readonly #o: InMemoryOptions;
  #own: Copy | null = null;
  /** Replicas this rank keeps, by owner rank. */
  #replicas = new Map<number, Copy>();
  /** The node-local files (null: process memory only). */
  readonly #files: SnapshotFiles | null;

  constructor(options: InMemoryOptions = {}) {
    const b = options.budgetBytes;
    if (b !== undefined && !(Number.isFinite(b) && b >= 0)) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `InMemoryCheckpoint: budgetBytes must be a non-negative number of bytes, received ${b}`);
    }
    if (options.overBudget !== undefined && options.overBudget !== 'throw' && options.overBudget !== 'skip') {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `InMemoryCheckpoint: overBudget must be 'throw' or 'skip', received ${String(options.overBudget)}`);
    }
    const s = options.staleAfterMs;
    if (s !== undefined && !(Number.isFinite(s) && s >= 0)) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `InMemoryCheckpoint: staleAfterMs must be a non-negative number, received ${s}`);
    }
    this.#o = options;
    const files = resolveFiles(options);
    this.#files = files && new SnapshotFiles(files.dir, files.job, s);
  }

  /** Where the frames live: the directory of the node-local files, or null (process memory). */
  get directory(): string | null {
    return this.#files?.dir ?? null;
  }

  /** Host bytes held now: own snapshot plus replicas kept for peers. */
  held(): HeldBytes {
    const own = this.#own?.bytes ?? 0;
    const replicas = [...this.#replicas.values()].reduce((a, c) => a + c.bytes, 0);
    return { step: this.#own?.meta.step ?? null, own, replicas, total: own + replicas, budgetBytes: this.#o.budgetBytes ?? Infinity };
  }

  /**
   * The frames held (own, and replicas by owner): for inspection. In process memory,
   * changing a byte makes its digest fail; with files, these are copies read from them.
   */
  frames(): { own: Uint8Array | null; replicas: Map<number, Uint8Array> } {
    return { own: this.#own ? frameOf(this.#own) : null, replicas: new Map([...this.#replicas].map(([k, c]) => [k, frameOf(c)])) };
  }

  /** Drops everything held, and the files of it. */
  clear(): void {
    for (const c of [this.#own, ...this.#replicas.values()]) if (c?.file) rmSync(c.file, { force: true });
    this.#own = null;
    this.#replicas.clear();
  }

  /** Drops everything held and every file of this rank (a run that finished; nccl-node run removes the job's files when it succeeds). */
  async discard(rank: number): Promise<void> {
    this.clear();
    if (this.#files) await this.#files.removeExcept(rank, new Set());
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
    let fact: { step: number; bytes: number; place: Placement; files: boolean; failure?: Failure };
    const files = this.#files;
    try {
      plan = planFrame(state, comm.rank, comm.size);
      fact = { step: plan.meta.step, bytes: plan.totalBytes, place: this.#place(comm), files: files !== null };
    } catch (err) {
      fact = { step: -1, bytes: 0, place: { node: 0, localRank: 0 }, files: files !== null, failure: failureOf(err) };
    }
    const facts = await gatherSmall(comm, fact, this.#o.timeoutMs);
    throwIfFailed(facts, 'in-memory snapshot');
    if (!plan) throw new Error('unreachable: this rank failed and said so');
    const steps = [...new Set(facts.map((f) => f.step))];
    if (steps.length > 1) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `in-memory snapshot: ranks called it at different steps (${facts.map((f, r) => `rank ${r}: ${f.step}`).join(', ')})`);
    }
    if (facts.some((f) => f.files !== facts[0]!.files)) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `in-memory snapshot: ranks disagree on node-local files (${facts.map((f, r) => `rank ${r}: ${f.files ? 'files' : 'process memory'}`).join(', ')}); give every rank the same dir and job`);
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
    const step = plan.meta.step;
    const staged = new Map<number, { tmp: string; file: string }>();
    let failure: Failure | undefined;
    const write = async (owner: number, f: Uint8Array) => {
      if (!files || failure) return;
      await files.stage(comm.rank, owner, step, f).then((s) => void staged.set(owner, s), (err) => void (failure ??= failureOf(err)));
    };
    await Promise.all([
      ...(mine >= 0 ? [comm.send(frame, mine, { timeoutMs: this.#o.timeoutMs })] : []),
      ...incoming.map((i) => comm.recv(i.frame, i.owner, { timeoutMs: this.#o.timeoutMs })),
      write(comm.rank, frame),
    ]);
    for (const i of incoming) await write(i.owner, i.frame);
    if (files) {
      // Commit only when every rank wrote all of its files; otherwise every rank keeps the previous step.
      const agreed = await gatherSmall(comm, { failure }, this.#o.timeoutMs);
      const bad = agreed.findIndex((a) => a.failure);
      if (bad >= 0) {
        for (const s of staged.values()) rmSync(s.tmp, { force: true });
        const f = agreed[bad]!.failure!;
        const reason = `in-memory snapshot of step ${step}: rank ${bad} could not write its node-local files: ${f.message}`;
        if (this.#o.overBudget === 'skip' && f.code === 'ERR_UNAVAILABLE') {
          process.emitWarning(reason, { code: 'NCCL_NODE_INMEMORY_NO_SPACE' });
          return { taken: false, step, holder: mine, seconds: (performance.now() - t0) / 1000, held: this.held(), reason };
        }
        throw new NcclNodeError(f.code, reason, { rank: bad, noSpace: f.code === 'ERR_UNAVAILABLE' });
      }
      for (const s of staged.values()) await files.publish(s);
    }
    const copy = (owner: number, f: Uint8Array, meta = metaOf(f)): Copy =>
      ({ frame: files ? null : f, meta, bytes: f.byteLength, ...(files ? { file: staged.get(owner)!.file } : {}) });
    this.#own = copy(comm.rank, frame, plan.meta);
    this.#replicas = new Map(incoming.map((i) => [i.owner, copy(i.owner, i.frame)]));
    // The previous step's files go once this one is complete here.
    await files?.removeExcept(comm.rank, new Set([...staged.values()].map((s) => s.file)));
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
      // A restarted process finds what its previous life (or this one) left in the node-local files.
      if (this.#files) ({ own: this.#own, replicas: this.#replicas } = await loadCopies(this.#files, comm.rank));
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
        ...from.flatMap((h, r) => (h === comm.rank ? [comm.send(frameOf(this.#replicas.get(r)!), r, { timeoutMs })] : [])),
        ...(buf ? [comm.recv(buf, want, { timeoutMs })] : []),
      ]);
      if (buf) {
        try {
          const meta = readFrame(buf, `replica of rank ${comm.rank} from rank ${want}`);
          if (meta.step !== step || meta.owner !== comm.rank) error = `replica from rank ${want} holds rank ${meta.owner} step ${meta.step}, wanted rank ${comm.rank} step ${step}`;
          received = { frame: buf, meta, bytes: buf.byteLength };
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
      await fillTargets(targets, frames.map((c) => ({ meta: c.meta, frame: frameOf(c) })));
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
    for (const [owner, c] of this.#replicas) if (c.meta.step !== plan.step || c.error) this.#replicas.delete(owner);
    await this.#rereplicate(comm, inv, plan.step);
    if (this.#files) {
      // A state received from a peer, and replicas sent again, go to this node's files too.
      for (const why of await persist(this.#files, comm.rank, [own!, ...this.#replicas.values()])) {
        process.emitWarning(`in-memory restore: kept in process memory only: ${why}`, { code: 'NCCL_NODE_INMEMORY_NO_SPACE' });
      }
    }
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
    send.set(frameOf(own));
    const all = new Uint8Array(width * comm.size);
    await comm.allGather(send, all, { timeoutMs: this.#o.timeoutMs });
    return sizes.map((n, r) => {
      const frame = all.subarray(r * width, r * width + n);
      return { frame, meta: r === comm.rank ? own.meta : readFrame(frame, `snapshot of rank ${r}`), bytes: n };
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
      ...(missing.includes(comm.rank) ? [comm.send(frameOf(this.#own!), holder[comm.rank]!, { timeoutMs: this.#o.timeoutMs })] : []),
      ...incoming.map((i) => comm.recv(i.frame, i.owner, { timeoutMs: this.#o.timeoutMs })),
    ]);
    for (const i of incoming) this.#replicas.set(i.owner, { frame: i.frame, meta: metaOf(i.frame), bytes: i.frame.byteLength });
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
