/**
 * Fault injection for the silent-data-corruption checks (CPU path): flips one bit (or
 * writes a value) on one rank at one step, in one of four places:
 *
 *   parameter   a parameter element after the optimizer step (memory at rest)
 *   optimizer   an optimizer-state element after the step
 *   gradient    a local gradient element as backward produces it, before the
 *               reduction (a wrong computation: every replica then applies it)
 *   collective  an element of the first float32 all-reduce or reduce-scatter result of
 *               the step on that rank (the gradient reduction, on one rank only)
 *
 * A FaultInjector is a step probe (probe.ts); the collective site also needs the
 * communicator train() runs on to be wrap()ped. Every rank builds the same injector;
 * only the fault's rank changes anything.
 */
import type { Communicator } from '../comm/communicator.js';
import { NcclNodeError } from '../errors.js';
import type { ParamLike } from '../runtime/types.js';
import type { StepContext, StepProbe } from './probe.js';
import { replicaTensors } from './sdc.js';

export type FaultSite = 'parameter' | 'optimizer' | 'gradient' | 'collective';
export const FAULT_SITES: readonly FaultSite[] = ['parameter', 'optimizer', 'gradient', 'collective'];

export interface Fault {
  site: FaultSite;
  rank: number;
  step: number;
  /** Element of the site's tensors laid end to end (wrapped modulo their total). */
  index: number;
  /** Bit of the float32 to flip (0: lowest mantissa bit, 31: sign). */
  bit?: number;
  /** Write this value instead of flipping a bit. */
  value?: number;
}

export interface FiredFault extends Fault {
  tensor: string;
  element: number;
  before: number;
  after: number;
}

/** Flips bit `bit` of a[i] (or sets it to `value`); returns the old and new values. */
export function corrupt(a: Float32Array, i: number, f: Pick<Fault, 'bit' | 'value'>): { before: number; after: number } {
  const before = a[i]!;
  if (f.value !== undefined) a[i] = f.value;
  else {
    const bit = f.bit ?? 0;
    if (!Number.isInteger(bit) || bit < 0 || bit > 31) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `fault: bit must be 0..31, received ${f.bit}`);
    const u = new Uint32Array(a.buffer, a.byteOffset + 4 * i, 1);
    u[0] = (u[0]! ^ (1 << bit)) >>> 0;
  }
  return { before, after: a[i]! };
}

/** The tensor and element that flat index `index` falls on (modulo the total). */
function locate(tensors: readonly [string, { length: number }][], index: number): [number, number] {
  const total = tensors.reduce((a, [, t]) => a + t.length, 0);
  if (total === 0) throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'fault: the site holds no elements');
  let i = ((index % total) + total) % total;
  for (let t = 0; t < tensors.length; t++) {
    const n = tensors[t]![1].length;
    if (i < n) return [t, i];
    i -= n;
  }
  throw new Error('unreachable');
}

export class FaultInjector implements StepProbe {
  readonly fired: FiredFault[] = [];
  #step = -1;
  readonly #mine: Fault[];
  /** Collective faults whose call is in flight. */
  readonly #claimed = new Set<Fault>();

  /** `params`: the model's parameters in registration order (names and sizes), for gradient faults. */
  constructor(readonly rank: number, faults: readonly Fault[], readonly params: readonly { name: string; size: number }[] = []) {
    for (const f of faults) {
      if (!FAULT_SITES.includes(f.site)) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `fault: site must be ${FAULT_SITES.join(', ')}, received ${f.site}`);
      if (f.site === 'gradient' && params.length === 0) throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'fault: a gradient fault needs the model parameters (names and sizes)');
    }
    this.#mine = faults.filter((f) => f.rank === rank);
  }

  #due(site: FaultSite): Fault[] {
    return this.#mine.filter((f) => f.site === site && f.step === this.#step && !this.#claimed.has(f));
  }

  #fire(f: Fault, tensor: string, a: Float32Array, element: number): void {
    const { before, after } = corrupt(a, element, f);
    this.#mine.splice(this.#mine.indexOf(f), 1);
    this.fired.push({ ...f, tensor, element, before, after });
  }

  begin(step: number): void {
    this.#step = step;
  }

  hooks<H extends object>(hooks: H): H {
    const h = hooks as { gradReady?: (p: ParamLike) => void };
    const sizes = this.params.map((p): [string, { length: number }] => [p.name, { length: p.size }]);
    return {
      ...hooks,
      gradReady: (p: ParamLike) => {
        for (const f of this.#due('gradient')) {
          const [t, e] = locate(sizes, f.index);
          if (sizes[t]![0] === p.name) this.#fire(f, `${p.name}.grad`, p.grad, e);
        }
        h.gradReady?.(p);
      },
    } as H;
  }

  stepped(ctx: StepContext): void {
    for (const site of ['parameter', 'optimizer'] as const) {
      for (const f of this.#due(site)) {
        const all = replicaTensors(ctx.dp, ctx.optimizer);
        const tensors = site === 'parameter' ? all.params : all.optimizer;
        const [t, e] = locate(tensors, f.index);
        this.#fire(f, tensors[t]![0], tensors[t]![1], e);
      }
    }
  }

  /**
   * `comm` with float32 all-reduce and reduce-scatter results corrupted on this rank at
   * the collective faults' steps (the first such call of the step). Other calls pass through.
   */
  wrap(comm: Communicator): Communicator {
    const self = this;
    return new Proxy(comm, {
      get(target, prop) {
        const v = Reflect.get(target, prop, target) as unknown;
        if (typeof v !== 'function') return v;
        if (prop !== 'allReduce' && prop !== 'reduceScatter') return v.bind(target);
        return (...args: unknown[]) => {
          const out = (prop === 'allReduce' ? args[0] : args[1]) as unknown;
          const work = (v as (...a: unknown[]) => PromiseLike<unknown>).apply(target, args);
          const due = out instanceof Float32Array ? self.#due('collective') : [];
          if (!due.length) return work;
          const f = due[0]!;
          self.#claimed.add(f); // the next call of the step is left alone
          return Promise.resolve(work).then((r) => {
            const [, e] = locate([['result', out as Float32Array]], f.index);
            self.#fire(f, `${prop}.result`, out as Float32Array, e);
            return r;
          });
        };
      },
    });
  }
}
