/**
 * A small multi-dtype state for the integrity tests: every global tensor is
 * bytes from a PRNG seeded by (name, step), sharded ZeRO-style over the ranks
 * (no replicated tensors, so every byte of every shard is read by a full load).
 */
import type { DType } from '../../src/dtypes.js';
import { flatShard, type CheckpointState } from '../../src/checkpoint/index.js';
import { rng } from '../../src/models/tiny-lm/kernels.js';

export const SPECS: { name: string; dtype: DType; shape: number[] }[] = [
  { name: 'layer.w', dtype: 'float32', shape: [37, 101] },
  { name: 'layer.bf', dtype: 'bfloat16', shape: [5003] },
  { name: 'opt.count', dtype: 'int64', shape: [9] },
  { name: 'opt.f64', dtype: 'float64', shape: [1500] },
  { name: 'emb.u8', dtype: 'uint8', shape: [777] },
];
const BYTES: Partial<Record<DType, number>> = { float32: 4, bfloat16: 2, int64: 8, float64: 8, uint8: 1 };

/** mulberry32, seeded, so a failing trial replays. */
export const prng = rng;

function seedOf(name: string, step: number): number {
  let h = step * 2654435761;
  for (const ch of name) h = Math.imul(h ^ ch.charCodeAt(0), 16777619);
  return h >>> 0;
}

export function numel(shape: number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/** The whole global tensor's bytes. */
export function globalBytes(name: string, step: number): Uint8Array {
  const s = SPECS.find((x) => x.name === name)!;
  const r = prng(seedOf(name, step));
  return new Uint8Array(numel(s.shape) * BYTES[s.dtype]!).map(() => Math.floor(r() * 256));
}

export function typed(dtype: DType, bytes: Uint8Array) {
  const b = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength);
  switch (dtype) {
    case 'float32': return new Float32Array(b);
    case 'bfloat16': return new Uint16Array(b);
    case 'int64': return new BigInt64Array(b);
    case 'float64': return new Float64Array(b);
    default: return new Uint8Array(b);
  }
}

export function integrityState(rank: number, world: number, step: number): CheckpointState {
  const tensors: CheckpointState['tensors'] = {};
  for (const s of SPECS) {
    const n = numel(s.shape);
    const shard = Math.ceil(n / world);
    const eb = BYTES[s.dtype]!;
    const mine = globalBytes(s.name, step).subarray(rank * shard * eb, Math.min(n, (rank + 1) * shard) * eb);
    tensors[s.name] = { ...flatShard(typed(s.dtype, mine), n, rank, world, s.dtype), globalShape: s.shape };
  }
  return { tensors, train: { step, rng: [step, 7], cursor: { epoch: 1, index: step * 3 } }, metadata: { config: { lr: 0.5 }, codeVersion: 'c1', dataVersion: 'd1' } };
}

/** Whole-tensor load targets (world size 1). */
export function fullTargets() {
  const t: Record<string, { data: ReturnType<typeof typed>; dtype: DType; offset: number }> = {};
  for (const s of SPECS) t[s.name] = { data: typed(s.dtype, new Uint8Array(numel(s.shape) * BYTES[s.dtype]!)), dtype: s.dtype, offset: 0 };
  return t;
}

/** Which tensors hold other bytes than step `step` saved; [] when all match. */
export function wrongTensors(t: ReturnType<typeof fullTargets>, step: number): string[] {
  return SPECS.filter((s) => {
    const d = t[s.name]!.data;
    return Buffer.compare(Buffer.from(d.buffer, d.byteOffset, d.byteLength), Buffer.from(globalBytes(s.name, step))) !== 0;
  }).map((s) => s.name);
}

/** A large float32 tensor (16 MiB) for tests whose reads must still be running when something else fails. */
export const BIG_N = 4 << 20;
export function bigOf(step: number): Float32Array {
  const a = new Float32Array(BIG_N);
  for (let i = 0; i < BIG_N; i++) a[i] = step * 1e6 + i;
  return a;
}
