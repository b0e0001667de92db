/**
 * Whole-checkpoint tools behind `nccl-node ckpt`: verify every checksum, and
 * consolidate all ranks' pieces into one safetensors file with global shapes.
 */
import { open, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { DTYPE_BYTES } from '../dtypes.js';
import { NcclNodeError, isNcclNodeError } from '../errors.js';
import { crc32cCombine } from './crc.js';
import { encodeHeader } from './safetensors.js';
import { io, settle } from './io.js';
import { hex, load, tensorAt, type LoadTarget } from './load.js';
import { COMMIT, HEADER, MANIFEST, PAST_END, damaged, numelOf, readManifest, unreadable, type Manifest } from './manifest.js';
import { arrayTypeOf, type HostArray } from '../dtypes.js';
import { committed } from './layout.js';

export interface VerifyProblem {
  file: string;
  /** The tensor whose bytes are bad, HEADER, PAST_END, or '' for the manifest and commit marker. */
  tensor: string;
  error: string;
}

/**
 * Checks everything a checkpoint's digests cover: commit.json and the manifest's
 * SHA-256 (a problem there is the only one reported: nothing else can be trusted),
 * the pieces' tiling of tensors and files, and per shard file its length, its
 * header's CRC, every chunk and piece CRC, and the whole file's CRC.
 */
export async function verify(dir: string): Promise<{ manifest: Manifest | null; problems: VerifyProblem[]; bytes: number }> {
  let m: Manifest;
  try {
    m = await readManifest(dir);
  } catch (err) {
    if (!isNcclNodeError(err) || typeof err.details.file !== 'string') throw err;
    return { manifest: null, problems: [{ file: err.details.file, tensor: String(err.details.tensor ?? ''), error: err.message }], bytes: 0 };
  }
  const problems: VerifyProblem[] = [];
  let bytes = 0;
  for (const f of m.files) {
    const pieces = Object.entries(m.tensors)
      .flatMap(([name, t]) => [...t.shards, ...t.replicas].filter((s) => s.file === f.file).map((s) => ({ name, s, n: s.length * DTYPE_BYTES[t.dtype] })))
      .sort((a, b) => a.s.dataOffset - b.s.dataOffset);
    const bad = (tensor: string, err: unknown) => problems.push({ file: f.file, tensor, error: (err as Error).message });
    let size: number;
    try {
      size = (await stat(join(dir, f.file))).size;
    } catch (err) {
      for (const p of pieces.length ? pieces : [{ name: HEADER }]) bad(p.name, unreadable(dir, f.file, p.name, err));
      continue;
    }
    if (size < f.bytes) bad(tensorAt(m, f.file, size), damaged(dir, f.file, tensorAt(m, f.file, size), `truncated: file has ${size} bytes, manifest says ${f.bytes}`));
    if (size > f.bytes) bad(PAST_END, damaged(dir, f.file, PAST_END, `file has ${size} bytes, manifest says ${f.bytes}: ${size - f.bytes} bytes after the last tensor`));
    const before = problems.length;
    let fileCrc = 0;
    try {
      const head = new Uint8Array(f.headerBytes);
      const r = await settle(() => io().ioReadFile(join(dir, f.file), [0], [head.length], [head]));
      if (r.crcs[0] !== f.headerCrc32c) throw damaged(dir, f.file, HEADER, `checksum mismatch (CRC32C ${hex(r.crcs[0]!)}, manifest says ${hex(f.headerCrc32c)})`);
      fileCrc = r.crcs[0]!;
      bytes += head.length;
    } catch (err) {
      bad(HEADER, err);
    }
    for (const { name, s, n } of pieces) {
      const buf = new Uint8Array(Math.min(n, m.chunkBytes));
      let whole = 0;
      try {
        for (let k = 0, off = 0; off < n; k++, off += m.chunkBytes) {
          const len = Math.min(m.chunkBytes, n - off);
          const r = await settle(() => io().ioReadFile(join(dir, f.file), [s.dataOffset + off], [len], [buf]));
          if (r.crcs[0] !== s.chunks[k]) throw damaged(dir, f.file, name, `checksum mismatch in bytes ${off}..${off + len} of its piece at element ${s.offset} (CRC32C ${hex(r.crcs[0]!)}, manifest says ${hex(s.chunks[k]!)})`);
          whole = crc32cCombine(whole, r.crcs[0]!, len);
          bytes += len;
        }
        if (whole !== s.crc32c) throw damaged(dir, f.file, name, `checksum mismatch (CRC32C ${hex(whole)}, manifest says ${hex(s.crc32c)})`);
        fileCrc = crc32cCombine(fileCrc, whole, n);
      } catch (err) {
        if (!(isNcclNodeError(err, 'ERR_IO') && size < f.bytes)) bad(name, err); // a cut file is reported once, above
      }
    }
    // Header and pieces tile the file (readManifest checked), so their CRCs make the file's.
    if (problems.length === before && size === f.bytes && fileCrc !== f.crc32c) {
      bad('', damaged(dir, f.file, '', `whole-file checksum mismatch (CRC32C ${hex(fileCrc)}, manifest says ${hex(f.crc32c)})`));
    }
  }
  return { manifest: m, problems, bytes };
}

/**
 * A checkpoint directory (it has a commit marker or a manifest) is returned as is,
 * damaged or not; a root gives its newest committed checkpoint, so `verify ROOT`
 * checks the one a load would try first.
 */
export async function resolveCheckpoint(dir: string): Promise<string> {
  for (const f of [COMMIT, MANIFEST]) {
    try {
      await stat(join(dir, f));
      return dir;
    } catch {
      // not a checkpoint directory: a root
    }
  }
  const newest = (await committed(dir))[0];
  if (!newest) throw new NcclNodeError('ERR_IO', `checkpoint: no committed checkpoint in ${dir}`, { dir });
  return newest.dir;
}

/**
 * One safetensors file holding every tensor at its global shape (what other
 * tools load). Tensors are assembled one at a time, so memory peaks at the
 * largest tensor, not the whole checkpoint.
 */
export async function consolidate(dir: string, out: string): Promise<{ tensors: number; bytes: number }> {
  const m = await readManifest(dir);
  const names = Object.keys(m.tensors).sort();
  const header = encodeHeader(
    names.map((n) => ({ name: n, dtype: m.tensors[n]!.dtype, shape: m.tensors[n]!.globalShape, byteLength: numelOf(m.tensors[n]!.globalShape) * DTYPE_BYTES[m.tensors[n]!.dtype] })),
    { format: 'pt', step: String(m.step), train: JSON.stringify(m.train), metadata: JSON.stringify(m.metadata) },
  );
  const fh = await open(out, 'w');
  try {
    await fh.write(header.bytes, 0, header.bytes.length, 0);
    for (const [i, n] of names.entries()) {
      const t = m.tensors[n]!;
      const numel = numelOf(t.globalShape);
      const Ctor = arrayTypeOf(t.dtype);
      const data = new Ctor(numel) as HostArray;
      const target: Record<string, LoadTarget> = { [n]: { data, dtype: t.dtype, offset: 0 } };
      await load(dir, target);
      await fh.write(new Uint8Array(data.buffer, data.byteOffset, data.byteLength), 0, data.byteLength, header.dataOffsets[i]!);
    }
    await fh.sync();
  } finally {
    await fh.close();
  }
  if (names.length === 0 && header.totalBytes !== header.bytes.length) throw new NcclNodeError('ERR_IO', 'consolidate: header size mismatch');
  return { tensors: names.length, bytes: header.totalBytes };
}
