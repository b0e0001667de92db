/**
 * The manifest and its commit marker. manifest.json lists every tensor's global
 * shape and where each saved piece lives (file, element offset, absolute byte
 * offset, CRC32C of the piece and of each chunk), every shard file's length and
 * digests (whole file, safetensors header), plus the train state and run
 * metadata. commit.json, written after it, holds the SHA-256 of the manifest's
 * bytes: its presence makes the checkpoint exist, and any edit to the manifest
 * (one the schema would accept included) no longer matches it. Both are read
 * through zod, so a foreign or damaged file fails with a field-level message.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { z } from 'zod';
import { DTYPES, DTYPE_BYTES } from '../dtypes.js';
import { NcclNodeError } from '../errors.js';

export const MANIFEST = 'manifest.json';
export const COMMIT = 'commit.json';
export const FORMAT = 'nccl-node-checkpoint';
export const VERSION = 2;
/** The `tensor` named by a damaged safetensors header, and by bytes after a file's last tensor. */
export const HEADER = '(safetensors header)';
export const PAST_END = '(past the last tensor)';

const int = z.number().int().nonnegative();
const crc = z.number().int().nonnegative().max(0xffffffff);

export const shardSchema = z.object({
  file: z.string().min(1),
  /** Flat element offset of the piece in the row-major global tensor. */
  offset: int,
  length: int,
  /** Absolute byte offset of the piece in `file`. */
  dataOffset: int,
  crc32c: crc,
  /** CRC32C of each chunkBytes-sized chunk of the piece: partial reads verify these. */
  chunks: z.array(crc),
});

export const tensorSchema = z.object({
  dtype: z.enum(DTYPES),
  globalShape: z.array(int),
  /** Pieces that tile the tensor exactly (no gap, no overlap): what load reads. */
  shards: z.array(shardSchema),
  /** Further copies of replicated pieces (other ranks' files): only verify reads them. */
  replicas: z.array(shardSchema),
});

export const fileSchema = z.object({
  file: z.string().min(1),
  rank: int,
  /** Exact length: bytes appended or cut off are damage. */
  bytes: int,
  /** The safetensors prefix (length field + JSON header) and its CRC32C. */
  headerBytes: int,
  headerCrc32c: crc,
  /** CRC32C of the whole file. */
  crc32c: crc,
  direct: z.boolean(),
  /** Present when the rank saved DeviceBuffers: true when cuFile wrote them. */
  gds: z.boolean().optional(),
});

export const manifestSchema = z.object({
  format: z.literal(FORMAT),
  version: z.literal(VERSION),
  step: int,
  worldSize: z.number().int().positive(),
  createdAt: z.string(),
  chunkBytes: z.number().int().positive(),
  files: z.array(fileSchema),
  tensors: z.record(z.string(), tensorSchema),
  /** step, RNG state, data-loader cursor: whatever JSON the loop needs to resume. */
  train: z.record(z.string(), z.unknown()),
  /** config, code version, data version. */
  metadata: z.record(z.string(), z.unknown()),
});

export const commitSchema = z.object({
  format: z.literal(FORMAT),
  version: z.literal(VERSION),
  step: int,
  manifest: z.object({ file: z.literal(MANIFEST), bytes: int, sha256: z.string().regex(/^[0-9a-f]{64}$/) }),
  /** SHA-256 of the fields above (markerCheck): damage to the marker itself names the marker. */
  check: z.string().regex(/^[0-9a-f]{64}$/),
});

export type Manifest = z.infer<typeof manifestSchema>;
export type ShardRecord = z.infer<typeof shardSchema>;
export type TensorRecord = z.infer<typeof tensorSchema>;
export type FileRecord = z.infer<typeof fileSchema>;
export type CommitMarker = z.infer<typeof commitSchema>;

export function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

function markerCheck(c: Omit<CommitMarker, 'check'>): string {
  return sha256(new TextEncoder().encode([c.format, c.version, c.step, c.manifest.file, c.manifest.bytes, c.manifest.sha256].join('\n')));
}

/** The manifest's bytes on disk and the commit marker that seals them. */
export function sealManifest(m: Manifest): { manifest: Uint8Array; commit: Uint8Array } {
  const manifest = new TextEncoder().encode(JSON.stringify(m));
  const fields = { format: FORMAT, version: VERSION, step: m.step, manifest: { file: MANIFEST, bytes: manifest.length, sha256: sha256(manifest) } } as const;
  const marker: CommitMarker = { ...fields, check: markerCheck(fields) };
  return { manifest, commit: new TextEncoder().encode(JSON.stringify(marker)) };
}

/** A damaged checkpoint: its bytes do not match what was committed. */
export function damaged(dir: string, file: string, tensor: string, why: string): NcclNodeError {
  const where = tensor ? `file ${file}, tensor ${tensor}` : `file ${file}`;
  return new NcclNodeError('ERR_CHECKSUM', `checkpoint ${dir}: ${where}: ${why}`, { dir, file, tensor, corrupt: true });
}

/** A file of the checkpoint that cannot be read at all (missing, no permission). */
export function unreadable(dir: string, file: string, tensor: string, err: unknown): NcclNodeError {
  const where = tensor ? `file ${file}, tensor ${tensor}` : `file ${file}`;
  const code = (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'missing' : 'unreadable';
  return new NcclNodeError('ERR_IO', `checkpoint ${dir}: ${where}: ${code} (${(err as Error).message})`, { dir, file, tensor, corrupt: true });
}

function parse<T>(schema: z.ZodType<T>, bytes: Buffer, dir: string, file: string): T {
  let raw: unknown;
  try {
    raw = JSON.parse(bytes.toString('utf8'));
  } catch (err) {
    throw damaged(dir, file, '', `not JSON (${(err as Error).message})`);
  }
  const r = schema.safeParse(raw);
  if (!r.success) {
    const issues = r.error.issues.map((i) => `${i.path.join('.') || 'top level'}: ${i.message}`).join('; ');
    throw damaged(dir, file, '', `invalid: ${issues}`);
  }
  return r.data;
}

async function readBytes(dir: string, file: string): Promise<Buffer> {
  try {
    return await readFile(join(dir, file));
  } catch (err) {
    throw unreadable(dir, file, '', err);
  }
}

/**
 * Reads `dir/manifest.json` after checking it against `dir/commit.json`; then checks
 * that the pieces tile every tensor and every file. ERR_IO when a file is missing
 * (no commit.json: not committed), ERR_CHECKSUM when anything does not match.
 */
export async function readManifest(dir: string): Promise<Manifest> {
  const marker = parse(commitSchema, await readBytes(dir, COMMIT), dir, COMMIT);
  if (markerCheck(marker) !== marker.check) throw damaged(dir, COMMIT, '', 'the commit marker does not match its own check digest: damaged or edited');
  const bytes = await readBytes(dir, MANIFEST);
  const digest = sha256(bytes);
  if (bytes.length !== marker.manifest.bytes || digest !== marker.manifest.sha256) {
    throw damaged(dir, MANIFEST, '', `${bytes.length} bytes with SHA-256 ${digest}, ${COMMIT} says ${marker.manifest.bytes} bytes with SHA-256 ${marker.manifest.sha256}: edited or damaged`);
  }
  const m = parse(manifestSchema, bytes, dir, MANIFEST);
  const dirStep = /^step-(\d+)$/.exec(basename(dir))?.[1];
  if (m.step !== marker.step || (dirStep !== undefined && Number(dirStep) !== m.step)) {
    throw damaged(dir, COMMIT, '', `step ${marker.step} in ${COMMIT}, ${m.step} in ${MANIFEST}${dirStep !== undefined ? `, ${Number(dirStep)} in the directory name` : ''}`);
  }
  checkLayout(dir, m);
  return m;
}

/**
 * The pieces tile each tensor's elements and each file's data area exactly, and
 * each piece has one chunk CRC per chunk: a manifest that passes covers every byte
 * of every shard with a checksum, and every element of every tensor with a piece.
 */
export function checkLayout(dir: string, m: Manifest): void {
  const files = new Map(m.files.map((f) => [f.file, { f, spans: [] as { a: number; b: number; tensor: string }[] }]));
  for (const [name, t] of Object.entries(m.tensors)) {
    const numel = numelOf(t.globalShape);
    const eb = DTYPE_BYTES[t.dtype];
    let next = 0;
    for (const s of t.shards) {
      if (s.offset !== next) {
        throw damaged(dir, MANIFEST, name, s.offset > next ? `elements [${next}, ${s.offset}) are in no saved piece` : `saved pieces overlap at element ${s.offset}`);
      }
      next = s.offset + s.length;
    }
    if (next !== numel) throw damaged(dir, MANIFEST, name, `saved pieces cover ${Math.min(next, numel)} of ${numel} elements${next > numel ? ' and run past its end' : ''}`);
    for (const s of [...t.shards, ...t.replicas]) {
      const bytes = s.length * eb;
      if (s.offset + s.length > numel) throw damaged(dir, MANIFEST, name, `piece [${s.offset}, ${s.offset + s.length}) is outside its ${numel} elements`);
      if (s.chunks.length !== Math.ceil(bytes / m.chunkBytes)) throw damaged(dir, MANIFEST, name, `${s.chunks.length} chunk CRCs for ${bytes} bytes in ${m.chunkBytes}-byte chunks`);
      const file = files.get(s.file);
      if (!file) throw damaged(dir, MANIFEST, name, `piece in ${s.file}, a file the manifest does not list`);
      file.spans.push({ a: s.dataOffset, b: s.dataOffset + bytes, tensor: name });
    }
  }
  for (const { f, spans } of files.values()) {
    let at = f.headerBytes;
    for (const s of spans.filter((x) => x.b > x.a).sort((x, y) => x.a - y.a)) {
      if (s.a !== at) throw damaged(dir, MANIFEST, s.tensor, `${f.file}: bytes [${Math.min(at, s.a)}, ${Math.max(at, s.a)}) are ${s.a > at ? 'in no piece' : 'in two pieces'}`);
      at = s.b;
    }
    if (at !== f.bytes) throw damaged(dir, MANIFEST, '', `${f.file}: its pieces end at byte ${at}, the file has ${f.bytes}`);
  }
}

export function numelOf(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}
