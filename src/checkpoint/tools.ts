/**
 * Whole-checkpoint tools behind `nccl-node ckpt`: verify every checksum, and
 * consolidate all ranks' pieces into one safetensors file with global shapes.
 */
import { open } from 'node:fs/promises';
import { join } from 'node:path';
import { DTYPE_BYTES } from '../dtypes.js';
import { NcclNodeError } from '../errors.js';
import { encodeHeader } from './format.js';
import { io, settle } from './io.js';
import { corrupt, hex, load, type LoadTarget } from './load.js';
import { numelOf, readManifest, type Manifest } from './manifest.js';
import { arrayTypeOf, type HostArray } from '../dtypes.js';
import { latest } from './layout.js';

export interface VerifyProblem {
  file: string;
  tensor: string;
  error: string;
}

/** Reads every saved piece in full; checks each chunk CRC and each piece's whole CRC. */
export async function verify(dir: string): Promise<{ manifest: Manifest; problems: VerifyProblem[]; bytes: number }> {
  const m = await readManifest(dir);
  const problems: VerifyProblem[] = [];
  let bytes = 0;
  for (const [name, t] of Object.entries(m.tensors)) {
    const eb = DTYPE_BYTES[t.dtype];
    for (const s of t.shards) {
      const n = s.length * eb;
      const buf = new Uint8Array(Math.min(n, m.chunkBytes));
      let whole = 0;
      try {
        for (let k = 0, off = 0; off < n; k++, off += m.chunkBytes) {
          const len = Math.min(m.chunkBytes, n - off);
          const r = await settle(() => io().ioReadFile(join(dir, s.file), [s.dataOffset + off], [len], [buf]));
          if (r.crcs[0] !== s.chunks[k]) throw corrupt(dir, s.file, name, `checksum mismatch in bytes ${off}..${off + len} (CRC32C ${hex(r.crcs[0]!)}, manifest says ${hex(s.chunks[k] ?? 0)})`);
          whole = io().crc32c(buf.subarray(0, len), whole);
          bytes += len;
        }
        if (whole !== s.crc32c) throw corrupt(dir, s.file, name, `checksum mismatch (CRC32C ${hex(whole)}, manifest says ${hex(s.crc32c)})`);
      } catch (err) {
        problems.push({ file: s.file, tensor: name, error: (err as Error).message });
      }
    }
  }
  return { manifest: m, problems, bytes };
}

/** Resolves a root to its newest committed checkpoint; a checkpoint dir is returned as is. */
export async function resolveCheckpoint(dir: string): Promise<string> {
  try {
    await readManifest(dir);
    return dir;
  } catch (err) {
    const l = await latest(dir);
    if (l) return l;
    throw err;
  }
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
