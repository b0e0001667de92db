/**
 * Loading at any world size. Each target says which flat range of a tensor this
 * rank wants; the loader intersects it with the saved pieces and reads only those
 * byte ranges, widened to whole CRC chunks so every byte read is verified, plus
 * each file's safetensors header (its CRC) and length. Reads land in staging
 * buffers; the targets are written only once every read of the checkpoint has
 * settled and checked out, so a damaged checkpoint (and a fallback past it) never
 * leaves its bytes in them. A mismatch names the file and the tensor.
 */
import { stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { DTYPE_BYTES, type HostArray } from '../dtypes.js';
import { NcclNodeError, isNcclNodeError } from '../errors.js';
import { DeviceBuffer } from '../gpu/device-buffer.js';
import { io, settle } from './io.js';
import { committed, listCheckpoints } from './layout.js';
import { COMMIT, HEADER, MANIFEST, PAST_END, damaged, numelOf, readManifest, unreadable, type Manifest } from './manifest.js';
import { nativeHandle, type IoMemory } from '../native.js';
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
  /** If the newest checkpoint is damaged (ERR_CHECKSUM) or unreadable (ERR_IO), try older committed ones (default false). */
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

/** `dir` is a root of step directories or one checkpoint directory. */
export async function load(dir: string, targets: Record<string, LoadTarget>, options: LoadOptions = {}): Promise<LoadResult> {
  const candidates = await candidatesOf(dir);
  if (candidates.length === 0) throw new NcclNodeError('ERR_IO', `checkpoint: no committed checkpoint in ${dir}${await whyNone(dir)}`, { dir });
  const skipped: LoadResult['skipped'] = [];
  for (const c of options.fallback ? candidates : candidates.slice(0, 1)) {
    try {
      const r = await loadOne(c, targets, options);
      return { ...r, skipped };
    } catch (err) {
      // A damaged or unreadable checkpoint moves on to the one before; bad targets do not.
      if (!options.fallback || !(isNcclNodeError(err, 'ERR_IO') || isNcclNodeError(err, 'ERR_CHECKSUM'))) throw err;
      skipped.push({ dir: c, error: err.message });
    }
  }
  throw new NcclNodeError('ERR_IO', `checkpoint: no loadable checkpoint in ${dir}:\n  ${skipped.map((s) => s.error).join('\n  ')}`, { dir, skipped });
}

/** A checkpoint directory (it has a commit marker or a manifest) is itself the one candidate. */
async function candidatesOf(dir: string): Promise<string[]> {
  for (const f of [COMMIT, MANIFEST]) {
    try {
      await stat(join(dir, f));
      return [dir];
    } catch {
      // not a checkpoint directory: a root
    }
  }
  return (await committed(dir)).map((e) => e.dir);
}

/** Names the step directories that hold a manifest but no commit marker, and what that means. */
async function whyNone(root: string): Promise<string> {
  const debris: string[] = [];
  for (const e of await listCheckpoints(root)) {
    if (!e.committed && (await stat(join(e.dir, MANIFEST)).then(() => true, () => false))) debris.push(basename(e.dir));
  }
  if (debris.length === 0) return '';
  return ` (${debris.join(', ')} ${debris.length === 1 ? 'has' : 'have'} ${MANIFEST} but no ${COMMIT}: a save that did not ` +
    `commit, or a checkpoint written before commit markers existed, which this version does not trust to load)`;
}

/** A byte range of a target or of a staging buffer: host bytes, or a uint8 view of a DeviceBuffer. */
type Bytes = Uint8Array | DeviceBuffer;

interface FilePlan {
  offsets: number[];
  lengths: number[];
  dsts: Bytes[];
  expect: number[];
  tensor: string[];
  what: string[];
}

function isDevice(d: LoadTarget['data']): d is DeviceBuffer {
  return d instanceof DeviceBuffer;
}

/** [a, b) bytes of a buffer (a DeviceBuffer gives a view; empty ranges a host empty array). */
function range(t: Bytes, a: number, b: number): Bytes {
  if (!(t instanceof DeviceBuffer)) return t.subarray(a, b);
  return b > a ? t.view(a, b - a, 'uint8') : new Uint8Array(0);
}

/** Host copies this large go to the native parallel copy. */
const PARALLEL_COPY_BYTES = 1 << 20;

async function loadOne(dir: string, targets: Record<string, LoadTarget>, options: LoadOptions): Promise<Omit<LoadResult, 'skipped'>> {
  const m = await readManifest(dir);
  const plans = new Map<string, FilePlan>();
  const planOf = (file: string): FilePlan => {
    let p = plans.get(file);
    if (!p) plans.set(file, (p = { offsets: [], lengths: [], dsts: [], expect: [], tensor: [], what: [] }));
    return p;
  };
  /** Staging buffers we allocated on devices (freed once every read has settled). */
  const owned: DeviceBuffer[] = [];
  /** What goes into the targets once the whole checkpoint checked out. */
  const copies: { from: Bytes; to: Bytes }[] = [];
  const pads: Bytes[] = [];
  try {
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
      if (want1 > numel) pads.push(range(target, Math.max(0, numel - want0) * eb, bytes));
      const chunkEl = m.chunkBytes / eb;
      // The manifest's pieces tile the tensor (readManifest checked), so they cover [want0, want1) ∩ [0, numel).
      for (const s of rec.shards) {
        const a = Math.max(want0, s.offset);
        const b = Math.min(want1, s.offset + s.length, numel);
        if (a >= b) continue;
        // Chunks of the piece (indices relative to the piece) that hold [a, b), staged whole.
        const k0 = Math.floor((a - s.offset) / chunkEl);
        const k1 = Math.ceil((b - s.offset) / chunkEl);
        const c0 = s.offset + k0 * chunkEl;
        const cEnd = Math.min(s.offset + k1 * chunkEl, s.offset + s.length);
        const stagedBytes = (cEnd - c0) * eb;
        const staging: Bytes = isDevice(t.data) ? own(owned, DeviceBuffer.alloc({ dtype: 'uint8', length: stagedBytes, device: t.data.device })) : new Uint8Array(stagedBytes);
        const p = planOf(s.file);
        for (let k = k0; k < k1; k++) {
          const from = (k - k0) * m.chunkBytes;
          const n = Math.min(m.chunkBytes, stagedBytes - from);
          p.offsets.push(s.dataOffset + k * m.chunkBytes);
          p.lengths.push(n);
          p.dsts.push(range(staging, from, from + n));
          p.expect.push(s.chunks[k]!);
          p.tensor.push(name);
          p.what.push(`bytes ${k * m.chunkBytes}..${k * m.chunkBytes + n} of its piece at element ${s.offset}`);
        }
        copies.push({ from: range(staging, (a - c0) * eb, (b - c0) * eb), to: range(target, (a - want0) * eb, (b - want0) * eb) });
      }
    }
    let bytesRead = 0;
    const gdsFallback: LoadResult['gdsFallback'] = [];
    let deviceFiles = 0;
    // Every file's reads settle before anything is decided: none may still be writing into
    // staging that is freed, or into targets that the next candidate fills.
    const settled = await Promise.allSettled([...plans].map(async ([file, p]) => {
      const header = await checkFile(dir, m, file, p);
      const dsts: IoMemory[] = [header.buf, ...p.dsts.map((d) => (d instanceof DeviceBuffer ? d[nativeHandle] : d))];
      const res = await settle(() => io().ioReadFile(join(dir, file), [0, ...p.offsets], [header.buf.length, ...p.lengths], dsts, { gds: options.gds ?? true }));
      if (res.crcs[0] !== header.crc) throw damaged(dir, file, HEADER, `checksum mismatch (CRC32C ${hex(res.crcs[0]!)}, manifest says ${hex(header.crc)})`);
      if (p.dsts.some((d) => d instanceof DeviceBuffer)) {
        deviceFiles++;
        if (!res.gds) gdsFallback.push({ file, reason: res.gdsReason });
      }
      p.lengths.forEach((n, i) => {
        const got = res.crcs[i + 1]!;
        if (got !== p.expect[i]) throw damaged(dir, file, p.tensor[i]!, `checksum mismatch in ${p.what[i]} (CRC32C ${hex(got)}, manifest says ${hex(p.expect[i]!)})`);
        bytesRead += n;
      });
    }));
    const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
    await fill(copies, pads);
    const gds = deviceFiles > 0 && gdsFallback.length === 0;
    return { dir, step: m.step, train: m.train, metadata: m.metadata, manifest: m, bytesRead, gds, gdsFallback };
  } finally {
    for (const b of owned) b.dispose();
  }
}

function own(list: DeviceBuffer[], b: DeviceBuffer): DeviceBuffer {
  list.push(b);
  return b;
}

/** The checked bytes go into the targets; elements past a tensor's end are zeroed (padding). */
async function fill(copies: { from: Bytes; to: Bytes }[], pads: Bytes[]): Promise<void> {
  const bigDst: Uint8Array[] = [];
  const bigSrc: Uint8Array[] = [];
  const device: Promise<void>[] = [];
  for (const { from, to } of copies) {
    if (to instanceof DeviceBuffer) device.push(from instanceof DeviceBuffer ? to.copyFromDevice(from) : to.copyFrom(from));
    else if (from instanceof DeviceBuffer) device.push(from.copyTo(to).then(() => undefined));
    else if (from.byteLength >= PARALLEL_COPY_BYTES) {
      bigDst.push(to);
      bigSrc.push(from);
    } else to.set(from);
  }
  if (bigDst.length > 0) device.push(settle(() => io().ioCopy(bigDst, bigSrc)).then(() => undefined));
  for (const pad of pads) {
    if (pad instanceof DeviceBuffer) device.push(pad.fillBytes(0));
    else pad.fill(0);
  }
  await Promise.all(device);
}

/**
 * The file is there with exactly the length the manifest records (a cut or an
 * extension names the tensor at that byte); returns the header's scratch and CRC.
 */
async function checkFile(dir: string, m: Manifest, file: string, p: FilePlan): Promise<{ buf: Uint8Array; crc: number }> {
  const f = m.files.find((x) => x.file === file)!;
  let size: number;
  try {
    size = (await stat(join(dir, file))).size;
  } catch (err) {
    throw unreadable(dir, file, p.tensor[0] ?? HEADER, err);
  }
  if (size < f.bytes) throw damaged(dir, file, tensorAt(m, file, size), `truncated: file has ${size} bytes, manifest says ${f.bytes}`);
  if (size > f.bytes) throw damaged(dir, file, PAST_END, `file has ${size} bytes, manifest says ${f.bytes}: ${size - f.bytes} bytes after the last tensor`);
  return { buf: new Uint8Array(f.headerBytes), crc: f.headerCrc32c };
}

/** The tensor whose bytes in `file` include byte `at` (the header when before the first). */
export function tensorAt(m: Manifest, file: string, at: number): string {
  const f = m.files.find((x) => x.file === file);
  if (f && at < f.headerBytes) return HEADER;
  for (const [name, t] of Object.entries(m.tensors)) {
    for (const s of [...t.shards, ...t.replicas]) {
      if (s.file === file && at >= s.dataOffset && at < s.dataOffset + s.length * DTYPE_BYTES[t.dtype]) return name;
    }
  }
  return PAST_END;
}

export function hex(n: number): string {
  return `0x${(n >>> 0).toString(16).padStart(8, '0')}`;
}
