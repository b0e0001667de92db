/**
 * A prepared corpus on disk: token shards (`shard-NNNNN.bin`, little-endian uint16 or
 * uint32 tokens back to back, no header, as nanoGPT's .bin files), `documents.bin`
 * (the global token offset where each document starts, uint64 little-endian) and
 * `index.json`, which records the tokenizer, the token width, and each file's
 * length and SHA-256. The dataset's fingerprint is the SHA-256 of the index's
 * canonical content: a resume checks it, so a loader never continues on other data.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { NcclNodeError } from '../errors.js';

export const INDEX_FILE = 'index.json';
export const DOCUMENTS_FILE = 'documents.bin';

export const TOKEN_DTYPES = ['uint16', 'uint32'] as const;
export type TokenDType = (typeof TOKEN_DTYPES)[number];
export const TOKEN_BYTES: Record<TokenDType, number> = { uint16: 2, uint32: 4 };

const fileEntry = z.object({
  file: z.string().regex(/^[^/\\]+$/, 'a file name inside the dataset directory'),
  bytes: z.number().int().nonnegative(),
  sha256: z.string().regex(/^[0-9a-f]{64}$/),
});

export const indexSchema = z.object({
  format: z.literal('nccl-node-tokens'),
  version: z.literal(1),
  tokenizer: z.object({
    /** gpt-tokenizer's encoding name (gpt2, r50k_base, cl100k_base, o200k_base, ...) or 'raw' for .bin input. */
    name: z.string(),
    package: z.string(),
    version: z.string(),
    vocabSize: z.number().int().positive(),
    /** The end-of-text token appended after each document (null for raw token input). */
    eot: z.number().int().nonnegative().nullable(),
  }),
  dtype: z.enum(TOKEN_DTYPES),
  tokens: z.number().int().nonnegative(),
  documents: fileEntry.extend({ count: z.number().int().nonnegative() }),
  shards: z.array(fileEntry.extend({ tokens: z.number().int().nonnegative() })),
  sources: z.array(z.object({ file: z.string(), documents: z.number().int().nonnegative(), tokens: z.number().int().nonnegative() })),
});
export type DatasetIndex = z.infer<typeof indexSchema>;

/** The smallest token width that holds every id of a vocabulary. */
export function dtypeFor(vocabSize: number): TokenDType {
  return vocabSize <= 0x10000 ? 'uint16' : 'uint32';
}

export function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/** SHA-256 of the index's content in a fixed key order: what a resume must match. */
export function fingerprintOf(index: DatasetIndex): string {
  const canonical = JSON.stringify(index, (_k, v: unknown) =>
    v && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1)))
      : v);
  return createHash('sha256').update(canonical).digest('hex');
}

export async function readIndex(dir: string): Promise<DatasetIndex> {
  const path = join(dir, INDEX_FILE);
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new NcclNodeError('ERR_IO', `dataset ${dir}: cannot read ${INDEX_FILE}: ${(err as Error).message}`, { file: path });
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new NcclNodeError('ERR_CHECKSUM', `dataset ${dir}: ${INDEX_FILE} is not JSON: ${(err as Error).message}`, { file: path });
  }
  const r = indexSchema.safeParse(json);
  if (!r.success) {
    const issue = r.error.issues[0]!;
    throw new NcclNodeError('ERR_CHECKSUM', `dataset ${dir}: ${INDEX_FILE} at ${issue.path.join('.') || '(root)'}: ${issue.message}`, { file: path });
  }
  const index = r.data;
  const sum = index.shards.reduce((a, s) => a + s.tokens, 0);
  if (sum !== index.tokens) {
    throw new NcclNodeError('ERR_CHECKSUM', `dataset ${dir}: ${INDEX_FILE} counts ${index.tokens} tokens, its shards ${sum}`, { file: path });
  }
  for (const s of index.shards) {
    if (s.bytes !== s.tokens * TOKEN_BYTES[index.dtype]) {
      throw new NcclNodeError('ERR_CHECKSUM', `dataset ${dir}: ${s.file} is listed with ${s.bytes} bytes for ${s.tokens} ${index.dtype} tokens`, { file: path });
    }
  }
  return index;
}
