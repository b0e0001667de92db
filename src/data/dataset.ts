/**
 * Positional reads from a prepared corpus: no file is loaded whole. Opening checks
 * the index and every file's length (a truncated shard is named at once);
 * `verify()` reads everything and checks each SHA-256. Reads go through the
 * libuv pool (FileHandle.read at an offset), off the training thread.
 */
import { createHash } from 'node:crypto';
import { open, stat, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { NcclNodeError } from '../errors.js';
import { TOKEN_BYTES, fingerprintOf, readIndex, type DatasetIndex } from './index-file.js';

export type TokenArray = Uint16Array | Uint32Array;

export class TokenDataset {
  readonly fingerprint: string;
  /** Global token offset where each shard starts, and one past the last. */
  readonly #starts: number[];
  readonly #handles = new Map<string, Promise<FileHandle>>();

  private constructor(readonly dir: string, readonly index: DatasetIndex) {
    this.fingerprint = fingerprintOf(index);
    this.#starts = [0];
    for (const s of index.shards) this.#starts.push(this.#starts[this.#starts.length - 1]! + s.tokens);
  }

  static async open(dir: string): Promise<TokenDataset> {
    const index = await readIndex(dir);
    for (const f of [...index.shards, index.documents]) {
      const path = join(dir, f.file);
      const size = await stat(path).then((s) => (s.isFile() ? s.size : -1), (err: Error) => {
        throw new NcclNodeError('ERR_IO', `dataset ${dir}: cannot read ${f.file}: ${err.message}`, { file: path });
      });
      if (size !== f.bytes) {
        throw new NcclNodeError('ERR_IO', `dataset ${dir}: ${f.file} has ${size < 0 ? 'no file' : `${size} bytes`}, the index says ${f.bytes} (truncated or replaced)`, { file: path });
      }
    }
    return new TokenDataset(dir, index);
  }

  get tokens(): number {
    return this.index.tokens;
  }

  /** Reads every file and checks its SHA-256; throws ERR_CHECKSUM naming the first bad file. */
  async verify(): Promise<void> {
    for (const f of [...this.index.shards, this.index.documents]) {
      const path = join(this.dir, f.file);
      const h = createHash('sha256');
      const fh = await open(path, 'r');
      try {
        const buf = Buffer.allocUnsafe(1 << 22);
        for (let pos = 0; pos < f.bytes;) {
          const { bytesRead } = await fh.read(buf, 0, Math.min(buf.length, f.bytes - pos), pos);
          if (bytesRead === 0) throw new NcclNodeError('ERR_IO', `dataset ${this.dir}: ${f.file} ended at byte ${pos} of ${f.bytes}`, { file: path });
          h.update(buf.subarray(0, bytesRead));
          pos += bytesRead;
        }
      } finally {
        await fh.close();
      }
      const got = h.digest('hex');
      if (got !== f.sha256) {
        throw new NcclNodeError('ERR_CHECKSUM', `dataset ${this.dir}: ${f.file} has SHA-256 ${got}, the index says ${f.sha256}`, { file: path });
      }
    }
  }

  /** Tokens [offset, offset + count) of the whole corpus, read across shard borders. */
  async read(offset: number, count: number): Promise<TokenArray> {
    if (!Number.isInteger(offset) || !Number.isInteger(count) || offset < 0 || count < 0 || offset + count > this.tokens) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `dataset ${this.dir}: tokens [${offset}, ${offset + count}) are outside [0, ${this.tokens})`);
    }
    const width = TOKEN_BYTES[this.index.dtype];
    const out = new Uint8Array(count * width);
    let shard = this.#shardOf(offset);
    for (let done = 0; done < count; shard++) {
      const s = this.index.shards[shard]!;
      const from = offset + done - this.#starts[shard]!;
      const n = Math.min(count - done, s.tokens - from);
      const fh = await this.#handle(s.file);
      const { bytesRead } = await fh.read(out, done * width, n * width, from * width);
      if (bytesRead !== n * width) {
        throw new NcclNodeError('ERR_IO', `dataset ${this.dir}: ${s.file} ended early (read ${bytesRead} of ${n * width} bytes at ${from * width})`, { file: join(this.dir, s.file) });
      }
      done += n;
    }
    return this.index.dtype === 'uint16' ? new Uint16Array(out.buffer) : new Uint32Array(out.buffer);
  }

  #shardOf(offset: number): number {
    let lo = 0, hi = this.index.shards.length - 1;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (this.#starts[mid]! <= offset) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

  #handle(file: string): Promise<FileHandle> {
    let h = this.#handles.get(file);
    if (!h) {
      const path = join(this.dir, file);
      h = open(path, 'r').catch((err: Error) => {
        this.#handles.delete(file);
        throw new NcclNodeError('ERR_IO', `dataset ${this.dir}: cannot open ${file}: ${err.message}`, { file: path });
      });
      this.#handles.set(file, h);
    }
    return h;
  }

  async close(): Promise<void> {
    const hs = [...this.#handles.values()];
    this.#handles.clear();
    await Promise.all(hs.map((h) => h.then((fh) => fh.close(), () => undefined)));
  }
}
