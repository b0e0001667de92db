/**
 * Loading at any world size. Each target says which flat range of a tensor this
 * rank wants; the loader intersects it with the saved pieces and reads only those
 * byte ranges, widened to whole CRC chunks so every byte read is verified. Chunks
 * wholly inside the target are read straight into it; edge chunks go through a
 * scratch buffer. A bad checksum or a short file names the file and the tensor.
 */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { nativeHandle } from '../comm/communicator.js';
import { DTYPE_BYTES, type HostArray } from '../dtypes.js';
import { NcclNodeError, isNcclNodeError } from '../errors.js';
import { DeviceBuffer } from '../gpu/device-buffer.js';
import { io, settle } from './io.js';
import { committed } from './layout.js';
import { MANIFEST, numelOf, readManifest, type Manifest } from './manifest.js';
import type { IoMemory } from './native-types.js';
import { dtypeOf } from './state.js';
import type { DType } from '../dtypes.js';

export interface LoadTarget {
  /** Filled in place; a DeviceBuffer with cuFileRead where GPUDirect Storage is usable. */
  data: HostArray | DeviceBuffer;
  dtype?: DType;
  /** Flat element offset of data[0] in the global tensor. */
  offset: number;
  /** Elements wanted (default data.length); elements past the tensor's end are zeroed (padding). */
  length?: number;
}

export interface LoadOptions {
  /** If the newest checkpoint is corrupt, try older committed ones (default false). */
  fallback?: boolean;
  /** Tensors in the checkpoint but not in targets are fine; targets missing from it are an error unless strict is false. */
  strict?: boolean;
  /** DeviceBuffer targets: read with GPUDirect Storage where usable (default true). */
  gds?: boolean;
}

export interface LoadResult {
  dir: string;
  step: number;
  train: Record<string, unknown>;
  metadata: Record<string, unknown>;
  manifest: Manifest;
  /** Checkpoints skipped by fallback, with why. */
  skipped: { dir: string; error: string }[];
  bytesRead: number;
  /** Every DeviceBuffer range was read with cuFileRead (false when there were none). */
  gds: boolean;
  /** Why files with DeviceBuffer ranges were read through host memory instead. */
  gdsFallback: { file: string; reason: string }[];
}

/** A corrupt or truncated checkpoint; details name the file and tensor. */
export function corrupt(dir: string, file: string, tensor: string, why: string): NcclNodeError {
  return new NcclNodeError('ERR_IO', `checkpoint ${dir}: file ${file}, tensor ${tensor}: ${why}`, { dir, file, tensor, corrupt: true });
}

/** `dir` is a root of step directories or one checkpoint directory. */
export async function load(dir: string, targets: Record<string, LoadTarget>, options: LoadOptions = {}): Promise<LoadResult> {
  const candidates = await candidatesOf(dir);
  if (candidates.length === 0) throw new NcclNodeError('ERR_IO', `checkpoint: no committed checkpoint in ${dir}`, { dir });
  const skipped: LoadResult['skipped'] = [];
  for (const c of options.fallback ? candidates : candidates.slice(0, 1)) {
    try {
      const r = await loadOne(c, targets, options);
      return { ...r, skipped };
    } catch (err) {
      if (!options.fallback || !isNcclNodeError(err, 'ERR_IO')) throw err;
      skipped.push({ dir: c, error: err.message });
    }
  }
  throw new NcclNodeError('ERR_IO', `checkpoint: no loadable checkpoint in ${dir}:\n  ${skipped.map((s) => s.error).join('\n  ')}`, { dir, skipped });
}

async function candidatesOf(dir: string): Promise<string[]> {
  try {
    await stat(join(dir, MANIFEST));
    return [dir];
  } catch {
    return (await committed(dir)).map((e) => e.dir);
  }
}

/** A byte range of a target: host bytes, or a uint8 view of a DeviceBuffer. */
type Bytes = Uint8Array | DeviceBuffer;

interface Plan {
  offsets: number[];
  lengths: number[];
  dsts: Bytes[];
  expect: number[];
  what: string[];
  /** Edge chunks: copy [from, from+n) of the scratch into the target at `to`. */
  copies: { item: number; from: number; n: number; to: Bytes }[];
}

function isDevice(d: LoadTarget['data']): d is DeviceBuffer {
  return d instanceof DeviceBuffer;
}

/** [a, b) bytes of a target (a DeviceBuffer gives a view; empty ranges a host empty array). */
function range(t: Bytes, a: number, b: number): Bytes {
  if (!(t instanceof DeviceBuffer)) return t.subarray(a, b);
  return b > a ? t.view(a, b - a, 'uint8') : new Uint8Array(0);
}

async function put(to: Bytes, src: Uint8Array): Promise<void> {
  if (to instanceof DeviceBuffer) await to.copyFrom(src);
  else to.set(src);
}

async function loadOne(dir: string, targets: Record<string, LoadTarget>, options: LoadOptions): Promise<Omit<LoadResult, 'skipped'>> {
  const m = await readManifest(dir);
  const plans = new Map<string, Plan>();
  const planOf = (file: string): Plan => {
    let p = plans.get(file);
    if (!p) plans.set(file, (p = { offsets: [], lengths: [], dsts: [], expect: [], what: [], copies: [] }));
    return p;
  };
  for (const [name, t] of Object.entries(targets)) {
    const rec = m.tensors[name];
    if (!rec) {
      if (options.strict === false) continue;
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `checkpoint ${dir}: no tensor ${name}`, { dir, tensor: name });
    }
    const dtype = isDevice(t.data) ? t.dtype ?? t.data.dtype : dtypeOf(t.data, t.dtype ?? rec.dtype, name);
    if (dtype !== rec.dtype) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `checkpoint tensor ${name} is ${rec.dtype}, the target is ${dtype}`);
    const eb = DTYPE_BYTES[dtype];
    const want0 = t.offset;
    const want1 = t.offset + (t.length ?? t.data.length);
    const numel = numelOf(rec.globalShape);
    const bytes = (want1 - want0) * eb;
    if (isDevice(t.data) && bytes > t.data.byteLength) throw new NcclNodeError('ERR_SIZE_MISMATCH', `checkpoint tensor ${name}: ${want1 - want0} elements do not fit the target DeviceBuffer of ${t.data.byteLength} bytes`);
    const target: Bytes = isDevice(t.data) ? t.data : new Uint8Array(t.data.buffer, t.data.byteOffset, bytes);
    if (want1 > numel) {
      const pad = range(target, Math.max(0, numel - want0) * eb, bytes);
      if (pad instanceof DeviceBuffer) await pad.fillBytes(0);
      else pad.fill(0);
    }
    let covered = 0;
    const chunkEl = m.chunkBytes / eb;
    for (const s of rec.shards) {
      const a = Math.max(want0, s.offset);
      const b = Math.min(want1, s.offset + s.length, numel);
      if (a >= b) continue;
      covered += b - a;
      // Chunks of the piece (indices relative to the piece) that hold [a, b).
      const k0 = Math.floor((a - s.offset) / chunkEl);
      const k1 = Math.ceil((b - s.offset) / chunkEl);
      const p = planOf(s.file);
      for (let k = k0; k < k1; k++) {
        const c0 = s.offset + k * chunkEl;
        const c1 = Math.min(c0 + chunkEl, s.offset + s.length);
        const n = (c1 - c0) * eb;
        p.offsets.push(s.dataOffset + k * m.chunkBytes);
        p.lengths.push(n);
        p.expect.push(s.chunks[k] ?? -1);
        p.what.push(`${name} (bytes ${k * m.chunkBytes}..${k * m.chunkBytes + n} of its piece at element ${s.offset})`);
        if (c0 >= a && c1 <= b) {
          p.dsts.push(range(target, (c0 - want0) * eb, (c1 - want0) * eb));
        } else {
          const scratch = new Uint8Array(n);
          p.dsts.push(scratch);
          const lo = Math.max(a, c0);
          const hi = Math.min(b, c1);
          p.copies.push({ item: p.dsts.length - 1, from: (lo - c0) * eb, n: (hi - lo) * eb, to: range(target, (lo - want0) * eb, (hi - want0) * eb) });
        }
      }
    }
    const need = Math.max(0, Math.min(want1, numel) - Math.max(want0, 0));
    if (covered !== need) throw new NcclNodeError('ERR_IO', `checkpoint ${dir}: tensor ${name}: saved pieces cover ${covered} of the ${need} elements wanted`, { dir, tensor: name });
  }
  let bytesRead = 0;
  let deviceFiles = 0;
  const gdsFallback: LoadResult['gdsFallback'] = [];
  await Promise.all([...plans].map(async ([file, p]) => {
    await checkSize(dir, m, file, p);
    const dsts: IoMemory[] = p.dsts.map((d) => (d instanceof DeviceBuffer ? d[nativeHandle] : d));
    const res = await settle(() => io().ioReadFile(join(dir, file), p.offsets, p.lengths, dsts, { gds: options.gds ?? true }));
    if (p.dsts.some((d) => d instanceof DeviceBuffer)) {
      deviceFiles++;
      if (!res.gds) gdsFallback.push({ file, reason: res.gdsReason });
    }
    p.lengths.forEach((n, i) => {
      if (res.crcs[i] !== p.expect[i]) throw corrupt(dir, file, p.what[i]!, `checksum mismatch (CRC32C ${hex(res.crcs[i]!)}, manifest says ${hex(p.expect[i]!)})`);
      bytesRead += n;
    });
    // Edge chunks went to host scratch (verified whole); their wanted part goes on now.
    for (const c of p.copies) await put(c.to, (p.dsts[c.item] as Uint8Array).subarray(c.from, c.from + c.n));
  }));
  const gds = deviceFiles > 0 && gdsFallback.length === 0;
  return { dir, step: m.step, train: m.train, metadata: m.metadata, manifest: m, bytesRead, gds, gdsFallback };
}

/** A truncated file fails here with the first tensor that runs past its end. */
async function checkSize(dir: string, m: Manifest, file: string, p: Plan): Promise<void> {
  let size: number;
  try {
    size = (await stat(join(dir, file))).size;
  } catch (err) {
    throw corrupt(dir, file, p.what[0] ?? '?', `missing (${(err as Error).message})`);
  }
  const expected = m.files.find((f) => f.file === file)?.bytes;
  p.offsets.forEach((o, i) => {
    if (o + p.lengths[i]! > size) throw corrupt(dir, file, p.what[i]!, `truncated: file has ${size} bytes, manifest says ${expected}`);
  });
  if (expected !== undefined && size !== expected) throw corrupt(dir, file, p.what[0] ?? '?', `file has ${size} bytes, manifest says ${expected}`);
}

export function hex(n: number): string {
  return `0x${(n >>> 0).toString(16).padStart(8, '0')}`;
}
