/**
 * Sharded, asynchronous, atomic saves. save() copies the state (the only part
 * the training step waits for) and returns a handle; the shard write, the
 * cross-rank gather and rank 0's manifest commit run in the background, one save
 * at a time. A second save while one is writing is queued (its snapshot taken
 * now), refused, or made to wait, as configured.
 */
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Communicator } from '../comm/communicator.js';
import { NcclNodeError } from '../errors.js';
import { DeviceBuffer } from '../gpu/device-buffer.js';
import { buildManifest, committedOnDisk, uncommit, writeManifest, type RankRecord } from './commit.js';
import { SaveCoordinator } from './save-coordinator.js';
import { crc32cConcat } from './crc.js';
import { encodeHeader } from './safetensors.js';
import { io, settle } from './io.js';
import { nativeHandle, type IoMemory, type IoWriteOptions } from '../native.js';
import { prune, shardFileName, stepDirName } from './layout.js';
import { SavePolicy, type SaveCost, type SavePolicyOptions } from './save-policy.js';
import { StagingPool, type DeviceStaging, type DeviceStagingOptions, type StagingOptions } from './staging.js';
import { dtypeOf, snapshot, type CheckpointState, type Staged } from './state.js';
import type { HostPoolStats } from './host-pool.js';

export interface CheckpointerOptions {
  /** The job's communicator; a sub-communicator is split off it for checkpoint traffic. */
  comm?: Communicator;
  /** Committed checkpoints to keep (default 3; 0 keeps all). */
  keep?: number;
  /** A save while another is being written: 'queue' (default), 'refuse' (ERR_UNAVAILABLE) or 'wait'. */
  whenBusy?: 'queue' | 'refuse' | 'wait';
  /** At most this many saves snapshotted but not committed (default 2: one writing, one queued). */
  maxPending?: number;
  write?: IoWriteOptions;
  /** DeviceBuffer snapshots: side stream, pinned allocator, GPUDirect Storage (see DeviceStagingOptions). */
  device?: DeviceStagingOptions;
  /** Host tensors' snapshots: the staging pool's budget (see StagingOptions, and prepare()). */
  staging?: StagingOptions;
  /** When shouldSave() says to save: a step list, an interval, or (default) Daly's interval after a first save. */
  policy?: SavePolicyOptions;
}

export interface CommitInfo {
  dir: string;
  step: number;
  bytes: number;
  direct: boolean;
  /** Background time from snapshot to durable commit. */
  seconds: number;
  pruned: string[];
  /** Retention failed after the commit (rank 0 only; the checkpoint itself is committed). */
  pruneError?: string;
  /** Every rank that saved DeviceBuffers wrote them with GPUDirect Storage (cuFileWrite); false if none did. */
  gds: boolean;
  /** Ranks whose DeviceBuffers went through host memory instead, and why. */
  gdsFallback: { rank: number; reason: string }[];
}

export interface SaveHandle {
  step: number;
  dir: string;
  /** What the caller waited for: the snapshot, or with `overlap` only starting it. */
  stallMs: number;
  /**
   * Resolves once the snapshot is complete and the state may change again. Already
   * resolved when save() returns, unless the save was made with `overlap: true`.
   */
  snapshotted: Promise<void>;
  /** Where this rank's DeviceBuffers were snapshotted: 'device' (for GDS), 'host' (pinned), 'none'. */
  deviceStaging: DeviceStaging;
  /** Resolves when the checkpoint is durable and committed on every rank. */
  committed: Promise<CommitInfo>;
}

const DEFAULT_CHUNK = 1 << 20;

export class Checkpointer {
  readonly #root: string;
  readonly #comm: Communicator | null;
  readonly #o: CheckpointerOptions;
  readonly #rank: number;
  readonly #world: number;
  #tail: Promise<unknown> = Promise.resolve();
  #pending = 0;
  /** Staging buffers of committed saves, reused so a snapshot is a memcpy, not an allocation. */
  readonly #pool: StagingPool;
  readonly #policy: SavePolicy;

  private constructor(root: string, comm: Communicator | null, o: CheckpointerOptions, policy: SavePolicy) {
    this.#root = root;
    this.#comm = comm;
    this.#o = o;
    this.#rank = comm?.rank ?? 0;
    this.#world = comm?.size ?? 1;
    this.#pool = new StagingPool(root, o.device, o.staging);
    this.#policy = policy;
  }

  /** Collective when a communicator is given: every rank must call it. */
  static async create(root: string, options: CheckpointerOptions = {}): Promise<Checkpointer> {
    const policy = new SavePolicy(options.policy); // bad options fail here, before the collective split
    let sub: Communicator | null = null;
    if (options.comm && options.comm.size > 1) sub = await options.comm.split({ color: 0 });
    return new Checkpointer(root, sub, options, policy);
  }

  /** Whether to save after `step` completed steps (`last`: the run's final step), by the policy. */
  shouldSave(step: number, options: { last?: boolean } = {}): boolean {
    return this.#policy.shouldSave(step, options);
  }

  /** True after the first save when the interval is to come from its cost: call recordSaveCost() on every rank. */
  get needsSaveCost(): boolean {
    return this.#policy.needsCost;
  }

  /**
   * Sets Daly's interval from the first save's cost. Every rank must save at the same
   * steps, so the costs are the maximum over ranks: one exchange on the caller's
   * communicator, in step with the caller on every rank (unlike the checkpoint's own,
   * whose background commit traffic interleaves differently on each rank). An object
   * exchange, not an all-reduce of a host array: an NCCL communicator takes device
   * memory only, and the object path stages through it.
   */
  async recordSaveCost(cost: SaveCost): Promise<SaveCost & { every: number; mtbfHours: number }> {
    if (!this.#policy.needsCost) this.#policy.recordCost(cost); // throws: no cost is wanted now
    const comm = this.#o.comm;
    const all = comm && comm.size > 1 ? await comm.allGatherObject([cost.stallSeconds, cost.stepSeconds]) : [[cost.stallSeconds, cost.stepSeconds]];
    const max = { stallSeconds: Math.max(...all.map((c) => c[0]!)), stepSeconds: Math.max(...all.map((c) => c[1]!)) };
    return { ...max, every: this.#policy.recordCost(max), mtbfHours: this.#policy.mtbfHours };
  }

  /**
   * Allocates and touches the host staging of `maxPending` saves of a state shaped like
   * this one (within the staging budget), on the addon's I/O threads; resolves when it
   * is ready. Called once after create() (and not awaited, if the first save is some
   * steps away), it makes the first save's snapshot a copy into warm memory like the
   * later ones instead of a first write to fresh pages. Local: no rank waits for another.
   */
  async prepare(state: CheckpointState): Promise<void> {
    let total = 0;
    let largest = 0;
    for (const [name, t] of Object.entries(state.tensors)) {
      if (!ArrayBuffer.isView(t.data)) continue; // DeviceBuffers stage in pinned or device memory
      const n = Math.ceil(((t.length ?? t.data.length) * t.data.BYTES_PER_ELEMENT) / 4096) * 4096;
      dtypeOf(t.data, t.dtype, name);
      total += n;
      largest = Math.max(largest, n);
    }
    await this.#pool.reserve(total * (this.#o.maxPending ?? 2), largest);
  }

  /** The host staging pool's budget, holdings and hit counts. */
  stagingStats(): HostPoolStats {
    return this.#pool.hostStats();
  }

  get inFlight(): number {
    return this.#pending;
  }

  /**
   * Snapshots now; `async: false` also waits for the commit. Every rank must call it,
   * in the same order. With `overlap: true` (async only) save() returns as soon as the
   * snapshot copies have started and `handle.snapshotted` says when they are done:
   * the caller runs its next forward and backward meanwhile and awaits `snapshotted`
   * before changing the state (the optimizer step), as CheckFreq pipelines snapshots.
   */
  async save(state: CheckpointState, options: { async?: boolean; overlap?: boolean } = {}): Promise<SaveHandle> {
    const policy = this.#o.whenBusy ?? 'queue';
    if (this.#pending > 0 && policy === 'refuse') {
      throw new NcclNodeError('ERR_UNAVAILABLE', `checkpoint: a save is already in flight (step ${state.train.step} refused; whenBusy: 'refuse')`, { busy: true });
    }
    if (this.#pending > 0 && policy === 'wait') await this.wait();
    if (this.#pending >= (this.#o.maxPending ?? 2)) {
      throw new NcclNodeError('ERR_UNAVAILABLE', `checkpoint: ${this.#pending} saves already pending (maxPending)`, { busy: true });
    }
    const step = state.train.step;
    if (!Number.isInteger(step) || step < 0) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `checkpoint: train.step must be a non-negative integer, received ${step}`);
    const t0 = performance.now();
    this.#pending++;
    const overlap = options.overlap === true && options.async !== false;
    let snap: Promise<Staged[]>;
    let deviceStaging: DeviceStaging;
    let train: Record<string, unknown>;
    let metadata: Record<string, unknown>;
    try {
      const first = Object.values(state.tensors).find((t) => t.data instanceof DeviceBuffer)?.data as DeviceBuffer | undefined;
      const o = this.#pool.options(first !== undefined, first?.device ?? 0);
      deviceStaging = o.staging;
      train = structuredClone(state.train) as Record<string, unknown>;
      metadata = structuredClone(state.metadata ?? {}) as Record<string, unknown>;
      snap = snapshot(state, o.snapshot);
      if (!overlap) await snap;
    } catch (err) {
      this.#pending--;
      throw err;
    }
    const stallMs = performance.now() - t0;
    const dir = join(this.#root, stepDirName(step));
    let staged: Staged[] = [];
    const run = this.#tail.catch(() => undefined).then(async () => {
      staged = await snap;
      return this.#write(dir, step, staged, train, metadata);
    });
    const committed = run.finally(() => {
      this.#pending--;
      this.#pool.give(staged);
    });
    this.#tail = committed;
    committed.catch(() => undefined); // the caller may never look; failures stay on the handle
    const snapshotted = snap.then(() => undefined);
    snapshotted.catch(() => undefined);
    const handle: SaveHandle = { step, dir, stallMs, snapshotted, deviceStaging, committed };
    this.#policy.saved();
    if (options.async === false) await committed;
    return handle;
  }

  /** Resolves when every save issued so far has committed (or failed). */
  async wait(): Promise<void> {
    await this.#tail.catch(() => undefined);
  }

  async #write(dir: string, step: number, staged: Staged[], train: Record<string, unknown>, metadata: Record<string, unknown>): Promise<CommitInfo> {
    const t0 = performance.now();
    const chunkBytes = this.#o.write?.chunkBytes ?? DEFAULT_CHUNK;
    await mkdir(dir, { recursive: true });
    if (this.#rank === 0) await uncommit(dir);
    const coordinator = new SaveCoordinator(this.#comm, step, dir);
    await coordinator.barrier();
    const file = shardFileName(this.#rank, this.#world);
    let mine: RankRecord;
    try {
      const header = encodeHeader(
        staged.map((s) => ({ name: s.name, dtype: s.dtype, shape: [s.length], byteLength: s.byteLength })),
        { format: 'nccl-node', rank: String(this.#rank), world: String(this.#world), step: String(step) },
      );
      const segments: IoMemory[] = staged.map((s) => (s.bytes instanceof DeviceBuffer ? s.bytes[nativeHandle] : s.bytes));
      const gds = this.#o.device?.gds !== 'off';
      const res = await settle(() => io().ioWriteFile(join(dir, file), [header.bytes, ...segments], [false, ...staged.map(() => true)], { gds, ...this.#o.write, chunkBytes }));
      // DeviceBuffers staged on the host never reached cuFile: the probe's reason says why.
      const device = staged.some((s) => s.fromDevice && s.byteLength > 0);
      const onHost = staged.some((s) => s.fromDevice && s.byteLength > 0 && !(s.bytes instanceof DeviceBuffer));
      const gdsReason = onHost ? this.#pool.gds().reason : res.gdsReason;
      // The whole file's CRC follows from the header's and the pieces' (they lie back to back).
      const headerCrc32c = io().crc32c(header.bytes);
      const crc32c = crc32cConcat([{ crc: headerCrc32c, bytes: header.bytes.length }, ...staged.map((s, i) => ({ crc: res.crcs[i]!, bytes: s.byteLength }))]);
      if (res.bytes !== header.totalBytes) throw new NcclNodeError('ERR_IO', `${file}: wrote ${res.bytes} bytes, the header lays out ${header.totalBytes}`);
      mine = {
        rank: this.#rank, file, bytes: res.bytes, headerBytes: header.bytes.length, headerCrc32c, crc32c, direct: res.direct,
        ...(device ? { gds: res.gds && !onHost, gdsReason } : {}),
        pieces: staged.map((s, i) => ({ name: s.name, dtype: s.dtype, globalShape: s.globalShape, offset: s.offset, length: s.length, dataOffset: header.dataOffsets[i]!, crc32c: res.crcs[i]!, chunks: [...res.chunks[i]!] })),
      };
    } catch (err) {
      mine = { rank: this.#rank, error: (err as Error).message };
    }
    // Every rank reaches the exchange, failed or not, so no rank hangs in it.
    const all = await coordinator.exchange(mine);
    const failed = all.filter((r) => r.error);
    let error = failed.length ? `checkpoint step ${step} not committed: ${failed.map((r) => `rank ${r.rank}: ${r.error}`).join('; ')}` : '';
    let pruned: string[] = [];
    let pruneError: string | undefined;
    if (this.#rank === 0 && !error) {
      try {
        await writeManifest(dir, buildManifest(step, chunkBytes, all, train, metadata));
      } catch (err) {
        error = `checkpoint step ${step} not committed: rank 0: ${(err as Error).message}`;
        // A commit marker whose durability is unknown must not outlive a "not committed".
        await uncommit(dir).catch(() => undefined);
      }
      if (!error) {
        faultPoint('exit-after-commit', step);
        const keep = this.#o.keep ?? 3;
        try {
          if (keep > 0) pruned = await prune(this.#root, keep);
        } catch (err) {
          pruneError = (err as Error).message;
        }
      }
    }
    // A rank that loses the verdict (rank 0, or another rank, died after the exchange) reads it
    // from the disk: rank 0 may have committed before it died, or may still be committing.
    const fromDisk = this.#rank === 0 ? async () => !error : () => settleFromDisk(dir, step, all);
    const verdict = await coordinator.verdict(!error, fromDisk);
    if (!verdict && !error) error = `checkpoint step ${step} not committed: rank 0 failed to write the manifest`;
    if (error) throw new NcclNodeError('ERR_IO', error, { step, dir });
    const bytes = all.reduce((a, r) => a + (r.bytes ?? 0), 0);
    const withDevice = all.filter((r) => r.gds !== undefined);
    return {
      dir, step, bytes, direct: all.every((r) => r.direct), seconds: (performance.now() - t0) / 1000, pruned,
      ...(pruneError !== undefined ? { pruneError } : {}),
      gds: withDevice.length > 0 && withDevice.every((r) => r.gds),
      gdsFallback: withDevice.filter((r) => !r.gds).map((r) => ({ rank: r.rank, reason: r.gdsReason ?? '' })),
    };
  }

  /** Waits for pending saves and drops the staging buffers. */
  async close(): Promise<void> {
    await this.wait();
    this.#pool.dispose();
  }
}

/** One-shot save (no retention, no staging reuse); every rank calls it. */
export async function save(state: CheckpointState, root: string, options: CheckpointerOptions & { async?: boolean } = {}): Promise<SaveHandle> {
  const c = await Checkpointer.create(root, { keep: 0, ...options });
  const h = await c.save(state, { async: options.async });
  // Frees the staging (device copies, pinned memory, the side stream) once committed or failed.
  h.committed.finally(() => c.close()).catch(() => undefined);
  return h;
}

/**
 * Fault injection for tests: NCCL_NODE_CKPT_FAULT=exit-after-commit (every save) or
 * exit-after-commit@N (the save of step N) makes the process SIGKILL itself right
 * after rank 0's commit is durable, before the verdict reaches the other ranks
 * (test/checkpoint/ranks.test.ts).
 */
function faultPoint(point: 'exit-after-commit', step: number): void {
  const f = process.env.NCCL_NODE_CKPT_FAULT;
  if (f === point || f === `${point}@${step}`) process.kill(process.pid, 'SIGKILL');
}

/** How long a rank that lost the verdict waits for rank 0's commit to appear on disk. */
const VERDICT_GRACE_MS = 3000;

async function settleFromDisk(dir: string, step: number, records: RankRecord[]): Promise<boolean> {
  const until = performance.now() + VERDICT_GRACE_MS;
  for (;;) {
    if (await committedOnDisk(dir, step, records)) return true;
    if (performance.now() >= until) return false;
    await new Promise((r) => setTimeout(r, 50));
  }
}
