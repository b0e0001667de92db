/**
 * safetensors encoding of one rank's shard file: an 8-byte little-endian header
 * length, a JSON header padded with spaces, then the tensors back to back (the
 * reference implementation rejects gaps). Each rank's file therefore opens in any
 * safetensors reader, as 1-D tensors holding that rank's flat piece.
 */
import type { DType } from '../dtypes.js';
import { NcclNodeError } from '../errors.js';

export const SAFETENSORS_DTYPE: Record<DType, string> = {
  int8: 'I8', uint8: 'U8', int32: 'I32', uint32: 'U32', int64: 'I64', uint64: 'U64',
  float16: 'F16', float32: 'F32', float64: 'F64', bfloat16: 'BF16', float8e4m3: 'F8_E4M3', float8e5m2: 'F8_E5M2',
};
const FROM_SAFETENSORS = Object.fromEntries(Object.entries(SAFETENSORS_DTYPE).map(([k, v]) => [v, k])) as Record<string, DType>;

/** The 100 MB cap safetensors readers enforce (a DoS guard). */
const MAX_HEADER = 100_000_000;
/** Header padding: the byte buffer starts 64-aligned, so float64 and SIMD readers are happy. */
const HEADER_ALIGN = 64;

export interface StEntry {
  name: string;
  dtype: DType;
  shape: number[];
  byteLength: number;
}

export interface StHeader {
  /** The whole prefix: length field + padded JSON. */
  bytes: Uint8Array;
  /** Absolute file offset of each entry's first byte, in entry order. */
  dataOffsets: number[];
  totalBytes: number;
}

export function encodeHeader(entries: readonly StEntry[], metadata: Record<string, string> = {}): StHeader {
  const json: Record<string, unknown> = { __metadata__: metadata };
  let pos = 0;
  const rel: number[] = [];
  for (const e of entries) {
    json[e.name] = { dtype: SAFETENSORS_DTYPE[e.dtype], shape: e.shape, data_offsets: [pos, pos + e.byteLength] };
    rel.push(pos);
    pos += e.byteLength;
  }
  const text = new TextEncoder().encode(JSON.stringify(json));
  const n = Math.ceil((8 + text.length) / HEADER_ALIGN) * HEADER_ALIGN - 8;
  const bytes = new Uint8Array(8 + n).fill(0x20);
  new DataView(bytes.buffer).setBigUint64(0, BigInt(n), true);
  bytes.set(text, 8);
  return { bytes, dataOffsets: rel.map((r) => 8 + n + r), totalBytes: 8 + n + pos };
}

export interface StTensor {
  dtype: DType;
  shape: number[];
  /** Absolute file offsets [begin, end). */
  begin: number;
  end: number;
}

export interface StFile {
  tensors: Map<string, StTensor>;
  metadata: Record<string, string>;
  dataStart: number;
}

/** Parses a header from the file's first bytes; `prefix` must hold 8 + N bytes (see headerLength). */
export function decodeHeader(prefix: Uint8Array, file: string): StFile {
  const n = headerLength(prefix, file);
  if (prefix.length < 8 + n) throw bad(file, `header needs ${8 + n} bytes, file has ${prefix.length}`);
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(new TextDecoder().decode(prefix.subarray(8, 8 + n))) as Record<string, unknown>;
  } catch (err) {
    throw bad(file, `header is not JSON (${(err as Error).message})`);
  }
  const tensors = new Map<string, StTensor>();
  let metadata: Record<string, string> = {};
  for (const [name, v] of Object.entries(raw)) {
    if (name === '__metadata__') {
      metadata = v as Record<string, string>;
      continue;
    }
    const t = v as { dtype: string; shape: number[]; data_offsets: [number, number] };
    const dtype = FROM_SAFETENSORS[t.dtype];
    if (!dtype) throw bad(file, `tensor ${name}: unsupported dtype ${t.dtype}`);
    tensors.set(name, { dtype, shape: t.shape, begin: 8 + n + t.data_offsets[0], end: 8 + n + t.data_offsets[1] });
  }
  return { tensors, metadata, dataStart: 8 + n };
}

export function headerLength(prefix: Uint8Array, file: string): number {
  if (prefix.length < 8) throw bad(file, 'shorter than the 8-byte header length');
  const n = Number(new DataView(prefix.buffer, prefix.byteOffset, 8).getBigUint64(0, true));
  if (n > MAX_HEADER) throw bad(file, `header length ${n} is over the 100 MB limit`);
  return n;
}

function bad(file: string, why: string): NcclNodeError {
  return new NcclNodeError('ERR_IO', `${file}: not a valid safetensors file: ${why}`, { file });
}
