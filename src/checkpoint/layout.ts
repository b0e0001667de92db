/**
 * Directory layout: ROOT/step-0000000042/{rank-00000-of-00004.safetensors, ...,
 * manifest.json, commit.json}. A step directory without commit.json is debris
 * from a save that died (or one still being written) and never counts as a
 * checkpoint.
 */
import { readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { COMMIT, readManifest } from './manifest.js';

const STEP_DIR = /^step-(\d{10})$/;

export function stepDirName(step: number): string {
  return `step-${String(step).padStart(10, '0')}`;
}

export function shardFileName(rank: number, world: number): string {
  return `rank-${String(rank).padStart(5, '0')}-of-${String(world).padStart(5, '0')}.safetensors`;
}

export interface Entry {
  step: number;
  dir: string;
  committed: boolean;
}

/** Every step directory under root, oldest first. */
export async function listCheckpoints(root: string): Promise<Entry[]> {
  let names: string[];
  try {
    names = await readdir(root);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const out: Entry[] = [];
  for (const name of names) {
    const m = STEP_DIR.exec(name);
    if (!m) continue;
    const dir = join(root, name);
    out.push({ step: Number(m[1]), dir, committed: await exists(join(dir, COMMIT)) });
  }
  return out.sort((a, b) => a.step - b.step);
}

/** Committed checkpoints, newest first (the order fallback tries them in). */
export async function committed(root: string): Promise<Entry[]> {
  return (await listCheckpoints(root)).filter((e) => e.committed).reverse();
}

/** The newest committed checkpoint whose manifest matches its commit marker and parses, or null. */
export async function latest(root: string): Promise<string | null> {
  for (const e of await committed(root)) {
    try {
      await readManifest(e.dir);
      return e.dir;
    } catch {
      // a manifest that does not validate is not a checkpoint; try the one before
    }
  }
  return null;
}

/**
 * Keeps the newest `keep` committed checkpoints; removes older ones and any
 * uncommitted debris older than the newest commit (never newer debris: that may
 * be a save in flight). The commit marker goes first, so a crash mid-removal
 * leaves debris, never a checkpoint with files missing.
 */
export async function prune(root: string, keep: number): Promise<string[]> {
  const all = await listCheckpoints(root);
  const done = all.filter((e) => e.committed);
  if (done.length === 0) return [];
  const newest = done[done.length - 1]!.step;
  const drop = new Set(done.slice(0, Math.max(0, done.length - Math.max(1, keep))).map((e) => e.dir));
  for (const e of all) if (!e.committed && e.step < newest) drop.add(e.dir);
  for (const dir of drop) {
    await rm(join(dir, COMMIT), { force: true });
    await rm(dir, { recursive: true, force: true });
  }
  return [...drop];
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}
