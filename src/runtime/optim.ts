/**
 * AdamW and SGD on flat Float32Array slots. The same code steps a whole
 * parameter (DDP) or one rank's shard of a unit (ZeRO): state is allocated per
 * slot key at the slot's size, so a sharded optimizer holds 1/N of the state.
 */
import { optimizerSchema, parse, type OptimizerOptions } from './options.js';

export interface Slot {
  /** Stable across steps: the state of this slot is kept under it. */
  key: string;
  param: Float32Array;
  grad: Float32Array;
}

export interface Optimizer {
  step(slots: Slot[]): void;
  /** Bytes of optimizer state held. */
  stateBytes(): number;
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
}

export class SGD implements Optimizer {
  #buf = new Map<string, Float32Array>();
  constructor(readonly o: { lr: number; momentum: number; weightDecay: number }) {}

  step(slots: Slot[]): void {
    const { lr, momentum, weightDecay } = this.o;
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
}

function state(map: Map<string, Float32Array>, key: string, n: number): Float32Array {
  let s = map.get(key);
  if (!s) map.set(key, (s = new Float32Array(n)));
  return s;
}

function bytesOf(map: Map<string, Float32Array>): number {
  let b = 0;
  for (const a of map.values()) b += a.byteLength;
  return b;
}

/** Σ x² in float64 over several arrays: the local part of a global gradient norm. */
export function sumSquares(arrays: Iterable<Float32Array>): number {
  let s = 0;
  for (const a of arrays) for (let i = 0; i < a.length; i++) s += a[i]! * a[i]!;
  return s;
}

/** The clip coefficient torch.nn.utils.clip_grad_norm_ uses: maxNorm / (norm + 1e-6), capped at 1. */
export function clipCoefficient(norm: number, maxNorm: number): number {
  return Math.min(1, maxNorm / (norm + 1e-6));
}
