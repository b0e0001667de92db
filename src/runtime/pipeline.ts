/**
 * Pipeline parallelism: the stages of a model on consecutive ranks of a pipeline
 * group, each micro-batch's activations sent downstream and its gradients
 * upstream with send/recv between neighbours.
 *
 * A schedule is each stage's list of actions, F(m) (forward of micro-batch m) and
 * B(m) (its backward). GPipe runs every forward, then every backward: simple, but
 * it keeps all M micro-batches' activations alive. 1F1B (PipeDream-Flush, as
 * Megatron-LM) starts with P - s - 1 forwards on stage s, then alternates one
 * forward and one backward, so stage s holds at most P - s micro-batches; both
 * have the bubble (P - 1) / (M + P - 1) of the step.
 *
 * Interleaved 1F1B gives each rank v model chunks (virtual stages c·P + s), so a
 * micro-batch crosses the ring v times and the bubble shrinks about v-fold.
 *
 * ZB-H1 (zero bubble, Qi et al. 2023) splits each backward into B, the input
 * gradient the previous stage waits for, and W, the weight gradients nobody waits
 * for. It keeps 1F1B's order of F and B (so the same traffic) and delays stage s's
 * W passes by s micro-batches: every stage then holds P micro-batches, as 1F1B's
 * first stage does, the B passes travel upstream without W in their way, and the
 * delayed W passes fill the tail of the step where 1F1B leaves stage s idle. With
 * F, B and W of equal cost its bubble is a third of 1F1B's.
 *
 * Sends are rendezvous (they finish when the peer's recv runs) and a
 * communicator runs its operations in order, so each direction of each
 * neighbour link has a communicator of its own, and sends are not awaited until
 * the end of the step: a stage waiting to send an activation downstream can
 * still receive the gradient its neighbour sends back (1F1B's crossing traffic),
 * and the interleaved ring cannot wait on itself.
 */
import { NcclNodeError } from '../errors.js';

export interface Action {
  /** F: forward, B: backward (input gradient too, and weight gradients unless a W follows), W: weight gradients. */
  kind: 'F' | 'B' | 'W';
  micro: number;
  /** Which of the rank's model chunks (interleaved schedules; 0 otherwise). */
  chunk: number;
}

export type ScheduleName = 'gpipe' | '1f1b' | 'interleaved-1f1b' | 'zb-h1';

/**
 * Stage `stage` of `stages`' actions for `micro` micro-batches. The interleaved
 * schedule gives each rank `chunks` model chunks (virtual stages chunk·P + stage)
 * and needs micro % stages == 0, as Megatron-LM's; its bubble is about
 * (P - 1) / (chunks · M) of the step.
 */
export function schedule(name: ScheduleName, stages: number, stage: number, micro: number, chunks = 1): Action[] {
  const F = (m: number, c = 0): Action => ({ kind: 'F', micro: m, chunk: c });
  const B = (m: number, c = 0): Action => ({ kind: 'B', micro: m, chunk: c });
  const range = (n: number) => [...Array(n).keys()];
  if (name === 'gpipe') return [...range(micro).map((m) => F(m)), ...range(micro).map((m) => B(m))];
  if (name === '1f1b') {
    const warmup = Math.min(stages - stage - 1, micro);
    const out = range(warmup).map((m) => F(m));
    for (let m = 0; m < micro - warmup; m++) out.push(F(m + warmup), B(m));
    for (let m = micro - warmup; m < micro; m++) out.push(B(m));
    return out;
  }
  if (name === 'zb-h1') {
    const W = (m: number): Action => ({ kind: 'W', micro: m, chunk: 0 });
    const warmup = Math.min(stages - stage - 1, micro), delay = stage, pending: number[] = [];
    const out = range(warmup).map((m) => F(m));
    // Steady phase: W passes wait until `delay` are pending; cool-down: one W after each B.
    const afterB = (m: number, coolDown: boolean) => {
      pending.push(m);
      if (pending.length > delay || coolDown) out.push(W(pending.shift()!));
    };
    for (let m = 0; m < micro - warmup; m++) (out.push(F(m + warmup), B(m)), afterB(m, false));
    for (let m = micro - warmup; m < micro; m++) (out.push(B(m)), afterB(m, true));
    return [...out, ...pending.map(W)];
  }
  if (name !== 'interleaved-1f1b') throw new NcclNodeError('ERR_INVALID_ARGUMENT', `pipeline schedule must be gpipe, 1f1b, interleaved-1f1b or zb-h1, received ${JSON.stringify(name)}`);
  if (micro % stages !== 0 || chunks < 1) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `interleaved-1f1b needs micro-batches divisible by the ${stages} stages and chunks >= 1, received ${micro} micro-batches, ${chunks} chunks`);
  }
  // The k-th forward (backward) of every rank is the same (micro-batch, chunk): groups of P
  // micro-batches go through chunk 0, then chunk 1, ... (backward: the chunks in reverse).
  const total = micro * chunks, P = stages;
  const microOf = (k: number) => Math.floor(k / (P * chunks)) * P + (k % P);
  const fwd = (k: number) => F(microOf(k), Math.floor(k / P) % chunks);
  const bwd = (k: number) => B(microOf(k), chunks - 1 - (Math.floor(k / P) % chunks));
  const warmup = Math.min((P - stage - 1) * 2 + (chunks - 1) * P, total);
  const out = range(warmup).map(fwd);
  for (let i = 0; i < total - warmup; i++) out.push(fwd(warmup + i), bwd(i));
  for (let i = total - warmup; i < total; i++) out.push(bwd(i));
  return out;
}

/** One stage's part of the model, as the schedule drives it. */
export interface PipelineStageModule {
  /** Elements of one micro-batch's activation (and gradient) at a stage boundary. */
  readonly boundarySize: number;
  /** Model chunks this rank holds (1, or v for interleaved schedules). */
  readonly chunks?: number;
  /** Forward of micro-batch m through chunk c; input is null on the first virtual stage. Returns what goes downstream (null on the last). */
  forward(m: number, input: Float32Array | null, chunk: number): Float32Array | null | Promise<Float32Array | null>;
  /**
   * Backward of micro-batch m through chunk c; dOut is null on the last virtual stage. Returns the input gradient
   * (null on the first). With deferWeights, the weight gradients wait for weight(m, chunk).
   */
  backward(m: number, dOut: Float32Array | null, chunk: number, options?: { deferWeights?: boolean }): Float32Array | null | Promise<Float32Array | null>;
  /** The W pass: the weight gradients backward(m, ..., {deferWeights: true}) left (schedules with W actions only). */
  weight?(m: number, chunk: number): void | Promise<void>;
}

/**
 * What the pipeline uses of its group: a Communicator, or a HostStagedComm
 * (host-staged-comm.ts) when the stages compute on host arrays over NCCL.
 */
export interface PipelineComm {
  readonly rank: number;
  readonly size: number;
  send(buf: Float32Array, peer: number): PromiseLike<unknown>;
  recv(buf: Float32Array, peer: number): PromiseLike<unknown>;
  split(options: { color: number }): PromiseLike<PipelineComm | null>;
  destroy(): Promise<void>;
}

/** A one-direction link to a neighbour: its own communicator, and the neighbour's rank in it. */
interface Link {
  comm: PipelineComm;
  peer: number;
}

export class Pipeline {
  private constructor(
    readonly group: PipelineComm,
    /** Activations from the previous and to the next rank; gradients back the other way. */
    readonly links: { actIn: Link; actOut: Link; gradIn: Link; gradOut: Link } | null,
    readonly chunks: number,
  ) {}

  get stage(): number {
    return this.group.rank;
  }

  get stages(): number {
    return this.group.size;
  }

  /**
   * Collective over the pipeline group. Each direction of each neighbour link gets a
   * communicator of its own (see the file comment): with `chunks` > 1 the last rank
   * also feeds the first, and a ring of rendezvous sends on one in-order channel
   * could wait on itself.
   */
  static async create(group: PipelineComm, options: { chunks?: number } = {}): Promise<Pipeline> {
    const chunks = options.chunks ?? 1;
    const P = group.size, s = group.rank;
    if (P === 1) return new Pipeline(group, null, chunks);
    // Link i joins ranks i and i+1 (mod P); each rank takes part in two of them per direction.
    // Only interleaved schedules use the wrap-around link P-1 -> 0 (the last rank feeds the first
    // rank's next chunk); with one chunk it is not made.
    const links = chunks > 1 ? P : P - 1;
    const pairs: Array<PipelineComm | null> = [];
    for (const direction of [0, 1]) {
      for (let i = 0; i < links; i++) {
        const member = s === i || s === (i + 1) % P;
        pairs.push(await group.split({ color: member ? direction : -1 }));
      }
    }
    // A pair communicator orders its two ranks by group rank: the lower one is 0. A link not made
    // (the wrap-around one) is never used: its end ranks are the first and last virtual stages.
    const link = (direction: number, i: number, peer: number): Link => ({ comm: (i < links ? pairs[direction * links + i] : null) ?? unusedLink, peer: peer < s ? 0 : 1 });
    const prev = (s - 1 + P) % P, next = (s + 1) % P;
    return new Pipeline(group, {
      actIn: link(0, prev, prev),
      actOut: link(0, s, next),
      gradIn: link(1, s, next),
      gradOut: link(1, prev, prev),
    }, chunks);
  }

  /** Runs one step's actions on this stage. Every stage must run the same schedule, micro-batch and chunk counts. */
  async run(actions: readonly Action[], module: PipelineStageModule): Promise<void> {
    const s = this.stage, P = this.stages, v = module.chunks ?? 1;
    if (v !== this.chunks) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `pipeline: the stage module has ${v} chunks, the pipeline was created for ${this.chunks}`);
    const lastVirtual = P * v - 1;
    // A schedule with W passes splits every backward: B leaves the weight gradients to its W.
    const split = actions.some((a) => a.kind === 'W');
    if (split && !module.weight) throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'pipeline: a schedule with W passes (zb-h1) needs a stage module with weight()');
    const sends: Promise<unknown>[] = [];
    try {
      for (const a of actions) {
        const virtual = a.chunk * P + s;
        if (a.kind === 'F') {
          let input: Float32Array | null = null;
          if (virtual > 0) {
            input = new Float32Array(module.boundarySize);
            await this.links!.actIn.comm.recv(input, this.links!.actIn.peer);
          }
          const out = await module.forward(a.micro, input, a.chunk);
          if (virtual < lastVirtual) sends.push(Promise.resolve(this.links!.actOut.comm.send(expectSize(out, module.boundarySize, 'forward'), this.links!.actOut.peer)));
        } else if (a.kind === 'W') {
          await module.weight!(a.micro, a.chunk);
        } else {
          let dOut: Float32Array | null = null;
          if (virtual < lastVirtual) {
            dOut = new Float32Array(module.boundarySize);
            await this.links!.gradIn.comm.recv(dOut, this.links!.gradIn.peer);
          }
          const dx = await module.backward(a.micro, dOut, a.chunk, { deferWeights: split });
          if (virtual > 0) sends.push(Promise.resolve(this.links!.gradOut.comm.send(expectSize(dx, module.boundarySize, 'backward'), this.links!.gradOut.peer)));
        }
      }
    } finally {
      // Every send finishes (or fails) before the step returns: the buffers stay referenced until then.
      const settled = await Promise.allSettled(sends);
      const failed = settled.find((x): x is PromiseRejectedResult => x.status === 'rejected');
      if (failed) throw failed.reason;
    }
  }

  async destroy(): Promise<void> {
    if (!this.links) return;
    for (const c of new Set(Object.values(this.links).map((l) => l.comm))) if (c !== unusedLink) await c.destroy();
  }
}

/** Stands where the wrap-around link is not made; a call on it would be a schedule error. */
const unusedLink = new Proxy({} as PipelineComm, {
  get: () => { throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'pipeline: the wrap-around link exists only for interleaved schedules (chunks > 1)'); },
});

function expectSize(x: Float32Array | null, size: number, what: string): Float32Array {
  if (!x || x.length !== size) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `pipeline stage ${what} must return ${size} elements for its neighbour, returned ${x ? x.length : 'nothing'}`);
  }
  return x;
}
