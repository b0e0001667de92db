/**
 * Node-local snapshot files of in-memory checkpoints (what NVIDIA's resiliency
 * extension calls local checkpointing): each frame a rank holds, its own and the
 * replicas it keeps, lives in a file of a memory-backed directory (tmpfs, /dev/shm by
 * default), so a process restarted on the same node (a gang restart under the
 * launcher) finds them; a node that was replaced has none and gets its state from
 * the peer's replica over the network.
 *
 * Names carry the job (a digest of its id), the holder rank, the owner and the step:
 *   nccl-node-snapshot.<job key>.rank<holder>.own.step<step>
 *   nccl-node-snapshot.<job key>.rank<holder>.of<owner>.step<step>
 * A file is written under a temporary name and renamed once every rank wrote its
 * own (the snapshot's commit), so a name always holds a whole write of a complete
 * step; the frame's CRC32C catches anything else. Files of another job are
 * never read, only removed once older than `staleAfterMs`.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { NcclNodeError } from '../errors.js';

/** The directory the frames live in ('off': process memory only). Default /dev/shm where it exists. */
export const SNAPSHOT_DIR_ENV = 'NCCL_NODE_INMEMORY_DIR';
/** The job the files belong to: the same in every attempt of one job, different across jobs (nccl-node run sets it). */
export const JOB_ID_ENV = 'NCCL_NODE_JOB_ID';
export const DEFAULT_SNAPSHOT_DIR = '/dev/shm';
/** Files of other jobs older than this are removed (their job ended without cleaning up). */
export const DEFAULT_STALE_AFTER_MS = 6 * 3600_000;

const PREFIX = 'nccl-node-snapshot.';
const NAME = /^nccl-node-snapshot\.([0-9a-f]{16})\.rank(\d+)\.(?:own|of(\d+))\.step(\d+)$/;

/** What `nccl-node run` gives its ranks as NCCL_NODE_JOB_ID: a digest of the job's token and run id, the same across restarts. */
export function launcherJobId(token: string, runId: string): string {
  return createHash('sha256').update(`nccl-node snapshot job\0${token}\0${runId}`).digest('hex').slice(0, 32);
}

/** The directory and job from the options or the environment; null when the frames stay in process memory. */
export function resolveFiles(o: { dir?: string | false; job?: string }, env: NodeJS.ProcessEnv = process.env): { dir: string; job: string } | null {
  const fromEnv = env[SNAPSHOT_DIR_ENV];
  const dir = o.dir ?? (fromEnv === 'off' ? false : fromEnv || (existsSync(DEFAULT_SNAPSHOT_DIR) ? DEFAULT_SNAPSHOT_DIR : false));
  if (dir === false) return null;
  const run = env.TORCHELASTIC_RUN_ID;
  // Without a job id a restarted process could not tell its files from another job's.
  const job = o.job ?? (env[JOB_ID_ENV] || (run && run !== 'none' ? run : undefined));
  if (job === undefined) {
    if (typeof o.dir === 'string') throw new NcclNodeError('ERR_INVALID_ARGUMENT', `InMemoryCheckpoint: dir ${o.dir} needs a job id to key its files by (option job, or ${JOB_ID_ENV}); without one a restarted process could not tell its files from another job's`);
    return null;
  }
  if (typeof dir !== 'string' || dir === '') throw new NcclNodeError('ERR_INVALID_ARGUMENT', `InMemoryCheckpoint: dir must be a directory path or false, received ${JSON.stringify(dir)}`);
  if (typeof job !== 'string' || job === '') throw new NcclNodeError('ERR_INVALID_ARGUMENT', `InMemoryCheckpoint: job must be a non-empty string, received ${JSON.stringify(job)}`);
  return { dir, job };
}

export function jobKey(job: string): string {
  return createHash('sha256').update(job).digest('hex').slice(0, 16);
}

export interface SnapshotFile {
  owner: number;
  step: number;
  file: string;
}

export class SnapshotFiles {
  readonly key: string;
  #swept = false;

  constructor(readonly dir: string, job: string, readonly staleAfterMs = DEFAULT_STALE_AFTER_MS) {
    this.key = jobKey(job);
  }

  path(holder: number, owner: number, step: number): string {
    return path.join(this.dir, `${PREFIX}${this.key}.rank${holder}.${holder === owner ? 'own' : `of${owner}`}.step${step}`);
  }

  /** Writes a frame under its temporary name (not yet found by a restore); a full tmpfs is ERR_UNAVAILABLE with details.noSpace. */
  async stage(holder: number, owner: number, step: number, frame: Uint8Array): Promise<{ tmp: string; file: string }> {
    const file = this.path(holder, owner, step);
    const tmp = `${file}.tmp${process.pid}`;
    try {
      await mkdir(this.dir, { recursive: true, mode: 0o700 });
      await writeFile(tmp, frame, { mode: 0o600 });
    } catch (err) {
      await rm(tmp, { force: true }).catch(() => undefined);
      const e = err as NodeJS.ErrnoException;
      const full = e.code === 'ENOSPC';
      throw new NcclNodeError(full ? 'ERR_UNAVAILABLE' : 'ERR_IO',
        `in-memory snapshot: could not write ${frame.byteLength} bytes to ${file}${full ? ` (no space left in ${this.dir}; the tmpfs is full)` : ''}: ${e.message}`,
        { noSpace: full, dir: this.dir, file, bytes: frame.byteLength });
    }
    return { tmp, file };
  }

  /** Renames a staged frame to its name: from here on a restore finds it whole. */
  async publish(staged: { tmp: string; file: string }): Promise<string> {
    await rename(staged.tmp, staged.file);
    return staged.file;
  }

  async write(holder: number, owner: number, step: number, frame: Uint8Array): Promise<string> {
    return this.publish(await this.stage(holder, owner, step, frame));
  }

  /** This job's files held by `holder` (temporary leftovers of a write cut short are removed). */
  async list(holder: number): Promise<SnapshotFile[]> {
    await this.sweep();
    const out: SnapshotFile[] = [];
    const mine = `${PREFIX}${this.key}.rank${holder}.`;
    for (const name of await readdir(this.dir).catch(() => [] as string[])) {
      if (!name.startsWith(mine)) continue;
      const m = NAME.exec(name);
      if (!m) {
        if (name.includes('.tmp')) await rm(path.join(this.dir, name), { force: true });
        continue;
      }
      out.push({ owner: m[3] === undefined ? holder : Number(m[3]), step: Number(m[4]), file: path.join(this.dir, name) });
    }
    return out;
  }

  async read(file: string): Promise<Uint8Array> {
    return new Uint8Array(await readFile(file));
  }

  /** Removes `holder`'s files except `keep` (older steps once a newer one committed). */
  async removeExcept(holder: number, keep: ReadonlySet<string>): Promise<void> {
    for (const f of await this.list(holder)) if (!keep.has(f.file)) await rm(f.file, { force: true });
  }

  /** Files of other jobs older than staleAfterMs: removed once per process, on first use. */
  async sweep(): Promise<string[]> {
    if (this.#swept) return [];
    this.#swept = true;
    const removed: string[] = [];
    const now = Date.now();
    for (const name of await readdir(this.dir).catch(() => [] as string[])) {
      if (!name.startsWith(PREFIX) || name.startsWith(`${PREFIX}${this.key}.`)) continue;
      const file = path.join(this.dir, name);
      const s = await stat(file).catch(() => null);
      if (s && now - s.mtimeMs > this.staleAfterMs) {
        await rm(file, { force: true });
        removed.push(file);
      }
    }
    return removed;
  }
}

/** Removes every snapshot file of job `job` in `dir` (the job ended): how many were removed. */
export function removeJobFiles(dir: string, job: string): number {
  const start = `${PREFIX}${jobKey(job)}.`;
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return 0;
  }
  const mine = names.filter((name) => name.startsWith(start));
  for (const name of mine) rmSync(path.join(dir, name), { force: true });
  return mine.length;
}
