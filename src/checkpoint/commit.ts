/**
 * The commit half of a save: from every rank's shard record (gathered by
 * save-coordinator.ts on the checkpoint's own sub-communicator, so background saves never
 * interleave with training collectives: DCP's advice), rank 0 builds the
 * manifest, writes it, and commits it by writing commit.json (the manifest's
 * SHA-256) atomically: tmp, fsync, rename, fsync dir.
 */
import { open, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { NcclNodeError } from '../errors.js';
import { io, settle } from './io.js';
import { COMMIT, FORMAT, MANIFEST, VERSION, readManifest, sealManifest, type Manifest, type ShardRecord, type TensorRecord } from './manifest.js';
import type { Staged } from './state.js';

/** What one rank reports after writing its shard. */
export interface RankRecord {
  rank: number;
  error?: string;
  file?: string;
  bytes?: number;
  headerBytes?: number;
  headerCrc32c?: number;
  /** CRC32C of the whole file. */
  crc32c?: number;
  direct?: boolean;
  /** Only when the rank saved DeviceBuffers: whether cuFile wrote them, and why not. */
  gds?: boolean;
  gdsReason?: string;
  pieces?: { name: string; dtype: Staged['dtype']; globalShape: number[]; offset: number; length: number; dataOffset: number; crc32c: number; chunks: number[] }[];
}

export function buildManifest(step: number, chunkBytes: number, records: RankRecord[], train: Record<string, unknown>, metadata: Record<string, unknown>): Manifest {
  const tensors: Record<string, TensorRecord> = {};
  for (const r of records) {
    for (const p of r.pieces ?? []) {
      const t = (tensors[p.name] ??= { dtype: p.dtype, globalShape: p.globalShape, shards: [], replicas: [] });
      if (t.dtype !== p.dtype || t.globalShape.join() !== p.globalShape.join()) {
        throw new NcclNodeError('ERR_SIZE_MISMATCH', `checkpoint tensor ${p.name}: ranks disagree on dtype or global shape (${t.dtype}[${t.globalShape}] vs ${p.dtype}[${p.globalShape}] on rank ${r.rank})`);
      }
      if (p.length > 0) t.shards.push({ file: r.file!, offset: p.offset, length: p.length, dataOffset: p.dataOffset, crc32c: p.crc32c, chunks: p.chunks });
    }
  }
  for (const [name, t] of Object.entries(tensors)) {
    // Replicated pieces (DDP: every rank holds the whole tensor) are read from one file; the
    // other copies are listed as replicas so verify covers their bytes too.
    const all = t.shards.sort((a, b) => a.offset - b.offset || a.length - b.length);
    const same = (a: ShardRecord, b: ShardRecord) => a.offset === b.offset && a.length === b.length;
    t.shards = all.filter((s, i) => i === 0 || !same(s, all[i - 1]!));
    t.replicas = all.filter((s, i) => i > 0 && same(s, all[i - 1]!));
    let next = 0;
    for (const s of t.shards) {
      if (s.offset < next) throw new NcclNodeError('ERR_SIZE_MISMATCH', `checkpoint tensor ${name}: saved pieces overlap at element ${s.offset}`);
      if (s.offset > next) throw new NcclNodeError('ERR_SIZE_MISMATCH', `checkpoint tensor ${name}: no rank saved elements [${next}, ${s.offset})`);
      next = s.offset + s.length;
    }
    const numel = t.globalShape.reduce((a, b) => a * b, 1);
    if (next !== numel) throw new NcclNodeError('ERR_SIZE_MISMATCH', `checkpoint tensor ${name}: no rank saved elements [${next}, ${numel})`);
  }
  return {
    format: FORMAT,
    version: VERSION,
    step,
    worldSize: records.length,
    createdAt: new Date().toISOString(),
    chunkBytes,
    files: records.map((r) => ({
      file: r.file!, rank: r.rank, bytes: r.bytes!, headerBytes: r.headerBytes!, headerCrc32c: r.headerCrc32c!, crc32c: r.crc32c!,
      direct: r.direct!, ...(r.gds !== undefined ? { gds: r.gds } : {}),
    })),
    tensors,
    train,
    metadata,
  };
}

async function writeSynced(path: string, bytes: Uint8Array): Promise<void> {
  const fh = await open(path, 'w');
  try {
    await fh.writeFile(bytes);
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/**
 * The commit point: manifest.json first, then commit.json (its digest); once the
 * rename of commit.json is durable the checkpoint exists, not before. Without
 * commit.json a manifest is debris, so a crash between the two commits nothing.
 */
export async function writeManifest(dir: string, manifest: Manifest): Promise<void> {
  const sealed = sealManifest(manifest);
  await writeSynced(join(dir, `${MANIFEST}.tmp`), sealed.manifest);
  await rename(join(dir, `${MANIFEST}.tmp`), join(dir, MANIFEST));
  await writeSynced(join(dir, `${COMMIT}.tmp`), sealed.commit);
  // The manifest's rename must be durable before the marker that vouches for it.
  await settle(() => io().ioFsyncDir(dir));
  await rename(join(dir, `${COMMIT}.tmp`), join(dir, COMMIT));
  await settle(() => io().ioFsyncDir(dir));
}

/** Un-commits a step directory about to be rewritten: no commit may name half-new shards. */
export async function uncommit(dir: string): Promise<void> {
  // The marker goes first, durably, before anything it vouched for changes.
  for (const f of [COMMIT, MANIFEST]) {
    if (!(await exists(join(dir, f)))) continue;
    await rm(join(dir, f), { force: true });
    await settle(() => io().ioFsyncDir(dir));
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}

/**
 * Whether step `step` is durably committed in `dir` by the save whose shard
 * records are `records`: commit.json and manifest.json are there and valid, and
 * the manifest names exactly these files, lengths and digests. Ranks that lost
 * rank 0's verdict settle it with this, so what they report matches the disk.
 */
export async function committedOnDisk(dir: string, step: number, records: RankRecord[]): Promise<boolean> {
  let m: Manifest;
  try {
    m = await readManifest(dir);
  } catch {
    return false;
  }
  if (m.step !== step || m.files.length !== records.length) return false;
  return records.every((r) => {
    const f = m.files.find((x) => x.rank === r.rank);
    return f !== undefined && f.file === r.file && f.bytes === r.bytes && f.crc32c === r.crc32c;
  });
}
