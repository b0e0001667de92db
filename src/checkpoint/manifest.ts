/**
 * The manifest: the one file whose presence makes a checkpoint exist. It lists
 * every tensor's global shape and where each saved piece lives (file, element
 * offset, absolute byte offset, CRC32C of the piece and of each chunk), plus the
 * train state and run metadata. Read through zod so a hand-edited or foreign
 * file fails with a field-level message instead of a crash deep in the loader.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { DTYPES } from '../dtypes.js';
import { NcclNodeError } from '../errors.js';

export const MANIFEST = 'manifest.json';
export const FORMAT = 'nccl-node-checkpoint';

const int = z.number().int().nonnegative();

export const shardSchema = z.object({
  file: z.string().min(1),
  /** Flat element offset of the piece in the row-major global tensor. */
  offset: int,
  length: int,
  /** Absolute byte offset of the piece in `file`. */
  dataOffset: int,
  crc32c: int,
  /** CRC32C of each chunkBytes-sized chunk of the piece: partial reads verify these. */
  chunks: z.array(int),
});

export const tensorSchema = z.object({
  dtype: z.enum(DTYPES),
  globalShape: z.array(int),
  shards: z.array(shardSchema),
});

export const manifestSchema = z.object({
  format: z.literal(FORMAT),
  version: z.literal(1),
  step: int,
  worldSize: z.number().int().positive(),
  createdAt: z.string(),
  chunkBytes: z.number().int().positive(),
  /** gds: present when the rank saved DeviceBuffers; true when cuFile wrote them (older manifests lack it). */
  files: z.array(z.object({ file: z.string(), rank: int, bytes: int, direct: z.boolean(), gds: z.boolean().optional() })),
  tensors: z.record(z.string(), tensorSchema),
  /** step, RNG state, data-loader cursor: whatever JSON the loop needs to resume. */
  train: z.record(z.string(), z.unknown()),
  /** config, code version, data version. */
  metadata: z.record(z.string(), z.unknown()),
});

export type Manifest = z.infer<typeof manifestSchema>;
export type ShardRecord = z.infer<typeof shardSchema>;
export type TensorRecord = z.infer<typeof tensorSchema>;

/** Reads and validates `dir/manifest.json`; ERR_IO naming the file and each bad field. */
export async function readManifest(dir: string): Promise<Manifest> {
  const path = join(dir, MANIFEST);
  let raw: unknown;
  try {
    raw = JSON.parse(await readFile(path, 'utf8'));
  } catch (err) {
    throw new NcclNodeError('ERR_IO', `${path}: ${(err as Error).message}`, { file: path });
  }
  const r = manifestSchema.safeParse(raw);
  if (!r.success) {
    const issues = r.error.issues.map((i) => `${i.path.join('.') || 'manifest'}: ${i.message}`).join('; ');
    throw new NcclNodeError('ERR_IO', `${path}: invalid manifest: ${issues}`, { file: path });
  }
  const m = r.data;
  for (const [name, t] of Object.entries(m.tensors)) {
    const numel = t.globalShape.reduce((a, b) => a * b, 1);
    for (const s of t.shards) {
      if (s.offset + s.length > numel) {
        throw new NcclNodeError('ERR_IO', `${path}: tensor ${name}: piece [${s.offset}, ${s.offset + s.length}) is outside its ${numel} elements`, { file: path, tensor: name });
      }
    }
  }
  return m;
}

export function numelOf(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}
