/**
 * The commit half of a save: from every rank's shard record (gathered by
 * control.ts on the checkpoint's own sub-communicator, so background saves never
 * interleave with training collectives: DCP's advice), rank 0 builds the
 * manifest and writes it atomically (tmp, fsync, rename, fsync dir).
 */
import { open, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { NcclNodeError } from '../errors.js';
import { io, settle } from './io.js';
import { FORMAT, MANIFEST, type Manifest, type TensorRecord } from './manifest.js';
import type { Staged } from './state.js';

/** What one rank reports after writing its shard. */
export interface RankRecord {
  rank: number;
  error?: string;
  file?: string;
  bytes?: number;
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
      const t = (tensors[p.name] ??= { dtype: p.dtype, globalShape: p.globalShape, shards: [] });
      if (t.dtype !== p.dtype || t.globalShape.join() !== p.globalShape.join()) {
        throw new NcclNodeError('ERR_SIZE_MISMATCH', `checkpoint tensor ${p.name}: ranks disagree on dtype or global shape (${t.dtype}[${t.globalShape}] vs ${p.dtype}[${p.globalShape}] on rank ${r.rank})`);
      }
      if (p.length > 0) t.shards.push({ file: r.file!, offset: p.offset, length: p.length, dataOffset: p.dataOffset, crc32c: p.crc32c, chunks: p.chunks });
    }
  }
  for (const [name, t] of Object.entries(tensors)) {
    // Replicated pieces (DDP: every rank holds the whole tensor) are kept once; overlaps otherwise are a bug.
    t.shards.sort((a, b) => a.offset - b.offset);
    t.shards = t.shards.filter((s, i, all) => i === 0 || !(s.offset === all[i - 1]!.offset && s.length === all[i - 1]!.length));
    for (let i = 1; i < t.shards.length; i++) {
      const prev = t.shards[i - 1]!;
      if (t.shards[i]!.offset < prev.offset + prev.length) throw new NcclNodeError('ERR_SIZE_MISMATCH', `checkpoint tensor ${name}: saved pieces overlap at element ${t.shards[i]!.offset}`);
    }
  }
  return {
    format: FORMAT,
    version: 1,
    step,
    worldSize: records.length,
    createdAt: new Date().toISOString(),
    chunkBytes,
    files: records.map((r) => ({ file: r.file!, rank: r.rank, bytes: r.bytes!, direct: r.direct!, ...(r.gds !== undefined ? { gds: r.gds } : {}) })),
    tensors,
    train,
    metadata,
  };
}

/** The commit point: once the rename is durable the checkpoint exists, not before. */
export async function writeManifest(dir: string, manifest: Manifest): Promise<void> {
  const tmp = join(dir, `${MANIFEST}.tmp`);
  const fh = await open(tmp, 'w');
  try {
    await fh.writeFile(JSON.stringify(manifest));
    await fh.sync();
  } finally {
    await fh.close();
  }
  await rename(tmp, join(dir, MANIFEST));
  await settle(() => io().ioFsyncDir(dir));
}

/** Un-commits a step directory about to be rewritten: no manifest may name half-new shards. */
export async function uncommit(dir: string): Promise<void> {
  try {
    await stat(join(dir, MANIFEST));
  } catch {
    return;
  }
  await rm(join(dir, MANIFEST), { force: true });
  await settle(() => io().ioFsyncDir(dir));
}
