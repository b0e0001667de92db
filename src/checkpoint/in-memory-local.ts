/**
 * The copies an InMemoryCheckpoint holds (its own frame and the replicas it keeps),
 * in process memory or in node-local files (in-memory-files.ts): how a restarted
 * process reads them back, how a restore's outcome is written out again, and how a
 * copy reports itself to the others (digest checked).
 */
import { readFileSync } from 'node:fs';
import { checkFrame, readFrame, type FrameMeta } from './in-memory-frame.js';
import type { SnapshotFiles } from './in-memory-files.js';
import type { HeldEntry } from './in-memory-plan.js';

export interface Copy {
  /** The frame's bytes; null while they are only in `file` (read back for a restore). */
  frame: Uint8Array | null;
  meta: FrameMeta;
  bytes: number;
  file?: string;
  /** Why this copy cannot be used (its file failed to read or its digest): reported, never restored. */
  error?: string;
}

/** The frame's bytes, read from its file when not in process memory. */
export function frameOf(c: Copy): Uint8Array {
  return c.frame ?? new Uint8Array(readFileSync(c.file!));
}

/** A copy that only its name describes (its bytes cannot be trusted). */
function damaged(owner: number, step: number, file: string, frame: Uint8Array | null, error: string): Copy {
  return { frame, meta: { owner, world: 0, step, pieces: [], train: { step }, metadata: {} }, bytes: frame?.byteLength ?? 0, file, error };
}

/**
 * Rank `rank`'s copies from its files: the newest own frame and the newest replica of
 * each owner, read into memory and digest-checked; one that fails is kept with its
 * error (so the restore names it) and the next source is used instead.
 */
export async function loadCopies(files: SnapshotFiles, rank: number): Promise<{ own: Copy | null; replicas: Map<number, Copy> }> {
  const newest = new Map<number, { step: number; file: string }>();
  for (const f of await files.list(rank)) {
    const seen = newest.get(f.owner);
    if (!seen || f.step > seen.step) newest.set(f.owner, f);
  }
  let own: Copy | null = null;
  const replicas = new Map<number, Copy>();
  for (const [owner, { step, file }] of newest) {
    let c: Copy;
    try {
      const frame = await files.read(file);
      const check = checkFrame(frame);
      if (!check.ok) {
        c = damaged(owner, step, file, frame, `${file}: CRC32C ${check.actual.toString(16)} does not match the stored ${check.stored.toString(16)} (a torn or damaged file)`);
      } else {
        const meta = readFrame(frame, file);
        c = meta.owner === owner && meta.step === step
          ? { frame, meta, bytes: frame.byteLength, file }
          : damaged(owner, step, file, frame, `${file} holds rank ${meta.owner} step ${meta.step}, not what its name says`);
      }
    } catch (err) {
      c = damaged(owner, step, file, null, `${file}: ${(err as Error).message}`);
    }
    if (owner === rank) own = c;
    else replicas.set(owner, c);
  }
  return { own, replicas };
}

/**
 * After a restore: writes the copies that have no file yet (a state received from a
 * peer, a replica sent again), removes the rank's other files, and drops the frames
 * from process memory. A copy that cannot be written stays in memory; returns why.
 */
export async function persist(files: SnapshotFiles, rank: number, copies: Copy[]): Promise<string[]> {
  const problems: string[] = [];
  for (const c of copies) {
    if (c.file || !c.frame) continue;
    try {
      c.file = await files.write(rank, c.meta.owner, c.meta.step, c.frame);
    } catch (err) {
      problems.push((err as Error).message);
    }
  }
  await files.removeExcept(rank, new Set(copies.flatMap((c) => (c.file ? [c.file] : []))));
  for (const c of copies) if (c.file) c.frame = null;
  return problems;
}

/** A held copy as its holder reports it, digest checked now. */
export function entry(c: Copy | null): HeldEntry | null {
  if (!c) return null;
  const base = { owner: c.meta.owner, world: c.meta.world, step: c.meta.step, bytes: c.bytes };
  if (c.error) return { ...base, ok: false, error: c.error };
  const check = checkFrame(frameOf(c));
  return {
    ...base, ok: check.ok,
    ...(check.ok ? {} : { error: `CRC32C ${check.actual.toString(16)} does not match the stored ${check.stored.toString(16)}` }),
  };
}

/** A received replica's meta; a replica damaged in transit is kept and rejected when a restore checks it. */
export function metaOf(frame: Uint8Array): FrameMeta {
  try {
    return readFrame(frame, 'replica');
  } catch {
    return { owner: -1, world: 0, step: -1, pieces: [], train: { step: -1 }, metadata: {} };
  }
}
