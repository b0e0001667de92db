/**
 * A deterministic ZeRO-style state: units of odd sizes (so shards carry padding),
 * each with parameters and AdamW moments, every value a function of (tensor, index).
 * Save workers and the tests build it the same way at any world size.
 */
import { flatShard, type CheckpointState } from '../../src/checkpoint/index.js';

export const UNITS = [1000, 777, 50, 3];
export const TENSORS = UNITS.flatMap((_, u) => [`unit${u}.param`, `unit${u}.exp_avg`, `unit${u}.exp_avg_sq`]);

export function numelOf(name: string): number {
  return UNITS[Number(/^unit(\d+)/.exec(name)![1])]!;
}

export function value(name: string, i: number, step: number): number {
  let h = step * 7919;
  for (const ch of name) h = (h * 31 + ch.charCodeAt(0)) | 0;
  return Math.fround(Math.sin(i * 0.013 + h * 1e-4) * 3);
}

/** The padded shard rank `rank` of `world` holds (ZeRO layout: ceil(numel/world) each). */
export function shardOf(name: string, rank: number, world: number, step: number): Float32Array {
  const numel = numelOf(name);
  const shard = Math.ceil(numel / world);
  const out = new Float32Array(shard);
  for (let j = 0; j < shard; j++) {
    const g = rank * shard + j;
    out[j] = g < numel ? value(name, g, step) : 0;
  }
  return out;
}

export function stateFor(rank: number, world: number, step: number): CheckpointState {
  const tensors: CheckpointState['tensors'] = {};
  for (const name of TENSORS) tensors[name] = flatShard(shardOf(name, rank, world, step), numelOf(name), rank, world);
  // Replicated (DDP-style): every rank saves the whole tensor; the manifest keeps one copy.
  tensors['replicated.table'] = { data: new Int32Array([1, 2, 3, step]), globalShape: [2, 2], offset: 0 };
  return {
    tensors,
    train: { step, rng: [step, 42], dataCursor: { epoch: 0, index: step * 8 } },
    metadata: { config: { units: UNITS }, codeVersion: 'test', dataVersion: 'v1' },
  };
}

/** 8 MiB whose content depends on the step: saves take long enough to be killed mid-write. */
export function bigTensor(step: number): Float32Array {
  const a = new Float32Array(bigTensor.N);
  for (let i = 0; i < a.length; i += 1024) a[i] = step + i;
  a[a.length - 1] = step;
  return a;
}
bigTensor.N = 2 << 20;
