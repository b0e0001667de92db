/**
 * AdamW and SGD on flat Float32Array slots. The same code steps a whole
 * parameter (DDP) or one rank's shard of a unit (ZeRO): state is allocated per
 * slot key at the slot's size, so a sharded optimizer holds 1/N of the state.
 */
import { NcclNodeError } from '../errors.js';
import { optimizerSchema, parse, type OptimizerOptions } from './runtime-options.js';

export interface Slot {
  /** Stable across steps: the state of this slot is kept under it. */
  key: string;
  param: Float32Array;
  grad: Float32Array;
}

/**
 * Optimizer state for checkpoints: the step count and, per slot key, live
 * Float32Arrays named `${key}.${stateName}` (e.g. `unit0.exp_avg`). Live, so a
 * loader can fill them in place and a snapshot copies them.
 */
export interface OptimizerState {
  step: number;
  tensors: Record<string, Float32Array>;
}

export interface Optimizer {
  step(slots: Slot[]): void;
  /** Bytes of optimizer state held. */
  stateBytes(): number;
  /** State of these slots; state not yet created is allocated as zeros (what the first step would start from). */
  state(slots: readonly { key: string; size: number }[]): OptimizerState;
  /** What state() names each slot's tensors after the key (`${key}.${kind}`), without allocating any. */
  stateKinds(): string[];
  /** Sets the step count and copies any given tensors (named as state() names them) into the state. */
  loadState(s: { step: number; tensors?: Record<string, Float32Array> }): void;
}

export function createOptimizer(options: OptimizerOptions): Optimizer {
  const o = parse(optimizerSchema, options, 'createOptimizer');
  return o.kind === 'adamw' ? new AdamW(o) : new SGD(o);
}

export class AdamW implements Optimizer {
  #m = new Map<string, Float32Array>();
  #v = new Map<string, Float32Array>();
  #t = 0;
  constructor(readonly o: { lr: number; beta1: number; beta2: number; eps: number; weightDecay: number }) {}

  step(slots: Slot[]): void {
    this.#t += 1;
    const { lr, beta1, beta2, eps, weightDecay } = this.o;
    const bc1 = 1 - beta1 ** this.#t;
    const bc2 = 1 - beta2 ** this.#t;
    for (const { key, param, grad } of slots) {
      const m = state(this.#m, key, param.length);
      const v = state(this.#v, key, param.length);
      for (let i = 0; i < param.length; i++) {
        const g = grad[i]!;
        m[i] = beta1 * m[i]! + (1 - beta1) * g;
        v[i] = beta2 * v[i]! + (1 - beta2) * g * g;
        const update = m[i]! / bc1 / (Math.sqrt(v[i]! / bc2) + eps);
        param[i] = param[i]! - lr * (update + weightDecay * param[i]!);
      }
    }
  }

  stateBytes(): number {
    return bytesOf(this.#m) + bytesOf(this.#v);
  }

  state(slots: readonly { key: string; size: number }[]): OptimizerState {
    return { step: this.#t, tensors: named(slots, { exp_avg: this.#m, exp_avg_sq: this.#v }) };
  }

  stateKinds(): string[] {
    return ['exp_avg', 'exp_avg_sq'];
  }

  loadState(s: { step: number; tensors?: Record<string, Float32Array> }): void {
    this.#t = checkStep(s.step);
    restore(s.tensors, { exp_avg: this.#m, exp_avg_sq: this.#v });
  }
}

export class SGD implements Optimizer {
  #buf = new Map<string, Float32Array>();
  #steps = 0;
  constructor(readonly o: { lr: number; momentum: number; weightDecay: number }) {}

  step(slots: Slot[]): void {
    const { lr, momentum, weightDecay } = this.o;
    this.#steps += 1;
    for (const { key, param, grad } of slots) {
      const buf = momentum > 0 ? state(this.#buf, key, param.length) : null;
      for (let i = 0; i < param.length; i++) {
        let g = grad[i]! + weightDecay * param[i]!;
        if (buf) g = buf[i] = momentum * buf[i]! + g;
        param[i] = param[i]! - lr * g;
      }
    }
  }

  stateBytes(): number {
    return bytesOf(this.#buf);
  }

  state(slots: readonly { key: string; size: number }[]): OptimizerState {
    // Without momentum SGD has no state; the step count is still kept for resumed schedules.
    return { step: this.#steps, tensors: this.o.momentum > 0 ? named(slots, { momentum_buffer: this.#buf }) : {} };
  }

  stateKinds(): string[] {
    return this.o.momentum > 0 ? ['momentum_buffer'] : [];
  }

  loadState(s: { step: number; tensors?: Record<string, Float32Array> }): void {
    this.#steps = checkStep(s.step);
    restore(s.tensors, { momentum_buffer: this.#buf });
  }
}

function state(map: Map<string, Float32Array>, key: string, n: number): Float32Array {
  let s = map.get(key);
  if (!s) map.set(key, (s = new Float32Array(n)));
  return s;
}

function named(slots: readonly { key: string; size: number }[], maps: Record<string, Map<string, Float32Array>>): Record<string, Float32Array> {
  const out: Record<string, Float32Array> = {};
  for (const { key, size } of slots) for (const [what, map] of Object.entries(maps)) out[`${key}.${what}`] = state(map, key, size);
  return out;
}

/** Copies `${key}.${what}` tensors into the maps; the key is everything before the last dot. */
function restore(tensors: Record<string, Float32Array> | undefined, maps: Record<string, Map<string, Float32Array>>): void {
  for (const [name, src] of Object.entries(tensors ?? {})) {
    const dot = name.lastIndexOf('.');
    const map = maps[name.slice(dot + 1)];
    if (dot < 0 || !map) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `Optimizer.loadState: unknown state tensor ${name} (expected KEY.${Object.keys(maps).join('|KEY.')})`);
    const dst = state(map, name.slice(0, dot), src.length);
    if (dst.length !== src.length) throw new NcclNodeError('ERR_SIZE_MISMATCH', `Optimizer.loadState: ${name} has ${src.length} elements, the optimizer holds ${dst.length}`);
    if (dst !== src) dst.set(src);
  }
}

function checkStep(step: number): number {
  if (!Number.isInteger(step) || step < 0) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `Optimizer.loadState: step must be a non-negative integer, received ${step}`);
  return step;
}

function bytesOf(map: Map<string, Float32Array>): number {
  let b = 0;
  for (const a of map.values()) b += a.byteLength;
  return b;
}

/** The chunk of sumSquares' fixed summation order (native/kernels/optim_defs.h). */
export const SUM_SQUARES_CHUNK = 4096;

/**
 * Σ x² in float64 over several arrays: the local part of a global gradient norm.
 * Each array is summed in 4096-element chunks, then over its chunks, in order, so
 * the device kernel (which sums chunks in parallel) gives the same bits.
 */
export function sumSquares(arrays: Iterable<Float32Array>): number {
  let total = 0;
  for (const a of arrays) total += sumSquaresOf(a);
  return total;
}

function sumSquaresOf(a: Float32Array): number {
  let s = 0;
  for (let c = 0; c < a.length; c += SUM_SQUARES_CHUNK) {
    let chunk = 0;
    const end = Math.min(a.length, c + SUM_SQUARES_CHUNK);
    for (let i = c; i < end; i++) chunk += a[i]! * a[i]!;
    s += chunk;
  }
  return s;
}

/** The clip coefficient torch.nn.utils.clip_grad_norm_ uses: maxNorm / (norm + 1e-6), capped at 1. */
export function clipCoefficient(norm: number, maxNorm: number): number {
  return Math.min(1, maxNorm / (norm + 1e-6));
}
