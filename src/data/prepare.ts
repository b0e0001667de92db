/**
 * `nccl-node data prepare`: text into token shards. Text files (one document each)
 * and JSON-lines files (one document per line's "text") are tokenized with a real
 * BPE tokenizer (gpt-tokenizer, which ships its vocabularies: nothing is downloaded
 * at run time), the end-of-text token after each document, as nanoGPT's prepare
 * scripts do. nanoGPT's own `.bin` files (uint16 tokens, no header) are taken as
 * they are, their ids checked against the vocabulary. Shards are written as they
 * fill, each with its SHA-256, then documents.bin and index.json (see index-file.ts).
 */
import { createReadStream } from 'node:fs';
import { mkdir, open, readFile, rename, stat, writeFile, type FileHandle } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { basename, join } from 'node:path';
import { createInterface } from 'node:readline';
import { createHash, type Hash } from 'node:crypto';
import { NcclNodeError } from '../errors.js';
import {
  DOCUMENTS_FILE, INDEX_FILE, TOKEN_BYTES, dtypeFor, indexSchema, type DatasetIndex, type TokenDType,
} from './index-file.js';

/** The encodings gpt-tokenizer ships. */
export const TOKENIZERS = ['gpt2', 'r50k_base', 'p50k_base', 'p50k_edit', 'cl100k_base', 'o200k_base', 'o200k_harmony'] as const;
export type TokenizerName = (typeof TOKENIZERS)[number];

export interface Tokenizer {
  name: TokenizerName;
  version: string;
  vocabSize: number;
  eot: number;
  encode(text: string): number[];
  decode(tokens: Iterable<number>): string;
}

interface EncodingModule {
  encode(text: string, options?: { allowedSpecial?: Set<string>; disallowedSpecial?: Set<string> }): number[];
  decode(tokens: Iterable<number>): string;
  vocabularySize: number;
  EndOfText: string;
}

export async function loadTokenizer(name: string): Promise<Tokenizer> {
  if (!(TOKENIZERS as readonly string[]).includes(name)) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `data prepare: unknown tokenizer ${JSON.stringify(name)}; expected one of ${TOKENIZERS.join(', ')}`);
  }
  const m = (await import(`gpt-tokenizer/encoding/${name}`)) as EncodingModule;
  const version = (createRequire(import.meta.url)('gpt-tokenizer/package.json') as { version: string }).version;
  const eot = m.encode(m.EndOfText, { allowedSpecial: new Set([m.EndOfText]) });
  if (eot.length !== 1) throw new NcclNodeError('ERR_BACKEND', `tokenizer ${name}: the end-of-text token does not encode to one id`);
  // Special-token text inside documents is data, not control: encode it as plain text.
  return {
    name: name as TokenizerName, version, vocabSize: m.vocabularySize, eot: eot[0]!,
    encode: (text) => m.encode(text, { disallowedSpecial: new Set() }),
    decode: (tokens) => m.decode(tokens),
  };
}

export interface PrepareOptions {
  tokenizer: string;
  out: string;
  files: string[];
  /** Tokens per shard (default 2^24). */
  shardTokens?: number;
  /** Called as input bytes are consumed (a progress bar). */
  onProgress?: (bytesDone: number, bytesTotal: number) => void;
}

/** Writes shards of one dtype as tokens arrive; each shard's SHA-256 is computed while writing. */
class ShardWriter {
  readonly shards: DatasetIndex['shards'] = [];
  readonly docStarts: bigint[] = [];
  tokens = 0;
  #fh: FileHandle | null = null;
  #hash: Hash | null = null;
  #inShard = 0;
  #buf: Uint16Array | Uint32Array;
  #fill = 0;

  constructor(readonly dir: string, readonly dtype: TokenDType, readonly shardTokens: number) {
    this.#buf = dtype === 'uint16' ? new Uint16Array(1 << 16) : new Uint32Array(1 << 16);
  }

  /** Tokens pushed so far, written or still buffered. */
  get count(): number {
    return this.tokens + this.#fill;
  }

  startDocument(): void {
    this.docStarts.push(BigInt(this.count));
  }

  async push(tokens: ArrayLike<number>): Promise<void> {
    for (let i = 0; i < tokens.length; i++) {
      this.#buf[this.#fill++] = tokens[i]!;
      if (this.#fill === this.#buf.length || this.#inShard + this.#fill === this.shardTokens) await this.#flush();
    }
  }

  async #flush(): Promise<void> {
    if (this.#fill === 0) return;
    if (!this.#fh) {
      const file = `shard-${String(this.shards.length).padStart(5, '0')}.bin`;
      this.#fh = await open(join(this.dir, file), 'w');
      this.#hash = createHash('sha256');
      this.shards.push({ file, bytes: 0, sha256: '', tokens: 0 });
    }
    const bytes = new Uint8Array(this.#buf.buffer, 0, this.#fill * this.#buf.BYTES_PER_ELEMENT);
    await this.#fh.write(bytes);
    this.#hash!.update(bytes);
    this.#inShard += this.#fill;
    this.tokens += this.#fill;
    this.#fill = 0;
    if (this.#inShard === this.shardTokens) await this.#close();
  }

  async #close(): Promise<void> {
    if (!this.#fh) return;
    await this.#fh.sync();
    await this.#fh.close();
    const s = this.shards[this.shards.length - 1]!;
    s.tokens = this.#inShard;
    s.bytes = this.#inShard * TOKEN_BYTES[this.dtype];
    s.sha256 = this.#hash!.digest('hex');
    this.#fh = null;
    this.#hash = null;
    this.#inShard = 0;
  }

  async finish(): Promise<void> {
    await this.#flush();
    await this.#close();
  }
}

/** Reads one input as documents: a .jsonl file line by line ("text"), any other text file whole. */
async function* documentsOf(file: string, onBytes: (n: number) => void): AsyncGenerator<string> {
  if (!file.endsWith('.jsonl')) {
    const text = await readFile(file, 'utf8').catch((err: Error) => {
      throw new NcclNodeError('ERR_IO', `data prepare: cannot read ${file}: ${err.message}`, { file });
    });
    onBytes(Buffer.byteLength(text));
    yield text;
    return;
  }
  const lines = createInterface({ input: createReadStream(file, 'utf8'), crlfDelay: Infinity });
  let n = 0;
  for await (const line of lines) {
    n++;
    onBytes(Buffer.byteLength(line) + 1);
    if (!line.trim()) continue;
    let text: unknown;
    try {
      text = (JSON.parse(line) as { text?: unknown }).text;
    } catch (err) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `data prepare: ${file} line ${n} is not JSON: ${(err as Error).message}`, { file });
    }
    if (typeof text !== 'string') throw new NcclNodeError('ERR_INVALID_ARGUMENT', `data prepare: ${file} line ${n} has no string "text"`, { file });
    yield text;
  }
}

/** nanoGPT's .bin: uint16 ids back to back; every id must be in the vocabulary. */
async function rawTokens(file: string, vocabSize: number, onBytes: (n: number) => void): Promise<Uint16Array> {
  if (vocabSize > 0x10000) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `data prepare: ${file} holds uint16 tokens, but the vocabulary has ${vocabSize} ids (needs uint32)`, { file });
  }
  const bytes = await readFile(file).catch((err: Error) => {
    throw new NcclNodeError('ERR_IO', `data prepare: cannot read ${file}: ${err.message}`, { file });
  });
  if (bytes.length % 2 !== 0) throw new NcclNodeError('ERR_IO', `data prepare: ${file} has ${bytes.length} bytes, not a whole number of uint16 tokens (truncated?)`, { file });
  onBytes(bytes.length);
  const tokens = new Uint16Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
  for (let i = 0; i < tokens.length; i++) {
    if (tokens[i]! >= vocabSize) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `data prepare: ${file} token ${i} is ${tokens[i]}, outside the vocabulary (${vocabSize} ids)`, { file });
    }
  }
  return tokens;
}

export async function prepare(o: PrepareOptions): Promise<DatasetIndex> {
  if (o.files.length === 0) throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'data prepare: no input files');
  const shardTokens = o.shardTokens ?? 1 << 24;
  if (!Number.isInteger(shardTokens) || shardTokens < 1) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `data prepare: shardTokens must be a positive integer, received ${shardTokens}`);
  }
  const tok = await loadTokenizer(o.tokenizer);
  const dtype = dtypeFor(tok.vocabSize);
  await mkdir(o.out, { recursive: true });
  const total = (await Promise.all(o.files.map((f) => stat(f).then((s) => s.size, () => 0)))).reduce((a, b) => a + b, 0);
  let done = 0;
  const onBytes = (n: number) => o.onProgress?.((done += n), total);
  const w = new ShardWriter(o.out, dtype, shardTokens);
  const sources: DatasetIndex['sources'] = [];
  for (const file of o.files) {
    const before = w.count;
    let docs = 0;
    if (file.endsWith('.bin')) {
      w.startDocument();
      await w.push(await rawTokens(file, tok.vocabSize, onBytes));
      docs = 1;
    } else {
      for await (const text of documentsOf(file, onBytes)) {
        w.startDocument();
        await w.push(tok.encode(text));
        await w.push([tok.eot]);
        docs++;
      }
    }
    sources.push({ file: basename(file), documents: docs, tokens: w.count - before });
  }
  await w.finish();
  const starts = new BigUint64Array(w.docStarts);
  const docBytes = new Uint8Array(starts.buffer);
  await writeFile(join(o.out, DOCUMENTS_FILE), docBytes);
  const index: DatasetIndex = indexSchema.parse({
    format: 'nccl-node-tokens', version: 1,
    tokenizer: { name: tok.name, package: 'gpt-tokenizer', version: tok.version, vocabSize: tok.vocabSize, eot: tok.eot },
    dtype, tokens: w.tokens,
    documents: { file: DOCUMENTS_FILE, bytes: docBytes.length, sha256: createHash('sha256').update(docBytes).digest('hex'), count: starts.length },
    shards: w.shards, sources,
  });
  // The index last, by rename: a directory with an index is complete.
  const tmp = join(o.out, `${INDEX_FILE}.tmp`);
  await writeFile(tmp, `${JSON.stringify(index, null, 1)}\n`);
  await rename(tmp, join(o.out, INDEX_FILE));
  return index;
}
