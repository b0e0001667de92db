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
 * Sends are rendezvous (they finish when the peer's recv runs) and a
 * communicator runs its operations in order, so activations and gradients travel
 * on two communicators split from the group, and sends are not awaited until the
 * end of the step: a stage waiting to send an activation downstream can still
 * receive the gradient its neighbour sends back, which is what lets 1F1B's
 * crossing traffic proceed without a deadlock.
 */
import type { Communicator } from '../comm/communicator.js';
import { NcclNodeError } from '../errors.js';

export interface Action {
  kind: 'F' | 'B';
  micro: number;
}

export type ScheduleName = 'gpipe' | '1f1b';

/** Stage `stage` of `stages`' actions for `micro` micro-batches. */
export function schedule(name: ScheduleName, stages: number, stage: number, micro: number): Action[] {
  const F = (m: number): Action => ({ kind: 'F', micro: m });
  const B = (m: number): Action => ({ kind: 'B', micro: m });
  const range = (n: number) => [...Array(n).keys()];
  if (name === 'gpipe') return [...range(micro).map(F), ...range(micro).map(B)];
  if (name !== '1f1b') throw new NcclNodeError('ERR_INVALID_ARGUMENT', `pipeline schedule must be gpipe or 1f1b, received ${JSON.stringify(name)}`);
  const warmup = Math.min(stages - stage - 1, micro);
  const out = range(warmup).map(F);
  for (let m = 0; m < micro - warmup; m++) out.push(F(m + warmup), B(m));
  for (let m = micro - warmup; m < micro; m++) out.push(B(m));
  return out;
}

/** One stage's part of the model, as the schedule drives it. */
export interface PipelineStageModule {
  /** Elements of one micro-batch's activation (and gradient) at a stage boundary. */
  readonly boundarySize: number;
  /** Forward of micro-batch m; input is null on the first stage. Returns what goes downstream (null on the last). */
  forward(m: number, input: Float32Array | null): Float32Array | null | Promise<Float32Array | null>;
  /** Backward of micro-batch m; dOut is null on the last stage. Returns the input gradient (null on the first). */
  backward(m: number, dOut: Float32Array | null): Float32Array | null | Promise<Float32Array | null>;
}

export class Pipeline {
  private constructor(readonly group: Communicator, readonly activations: Communicator, readonly gradients: Communicator) {}

  get stage(): number {
    return this.group.rank;
  }

  get stages(): number {
    return this.group.size;
  }

  /** Collective over the pipeline group: splits the two channels (see the file comment). */
  static async create(group: Communicator): Promise<Pipeline> {
    const activations = await group.split({ color: 0 });
    const gradients = await group.split({ color: 0 });
    return new Pipeline(group, activations!, gradients!);
  }

  /** Runs one step's actions on this stage. Every stage must run the same schedule name and micro-batch count. */
  async run(actions: readonly Action[], module: PipelineStageModule): Promise<void> {
    const s = this.stage, last = this.stages - 1;
    const sends: Promise<unknown>[] = [];
    try {
      for (const a of actions) {
        if (a.kind === 'F') {
          let input: Float32Array | null = null;
          if (s > 0) {
            input = new Float32Array(module.boundarySize);
            await this.activations.recv(input, s - 1);
          }
          const out = await module.forward(a.micro, input);
          if (s < last) sends.push(Promise.resolve(this.activations.send(expectSize(out, module.boundarySize, 'forward'), s + 1)));
        } else {
          let dOut: Float32Array | null = null;
          if (s < last) {
            dOut = new Float32Array(module.boundarySize);
            await this.gradients.recv(dOut, s + 1);
          }
          const dx = await module.backward(a.micro, dOut);
          if (s > 0) sends.push(Promise.resolve(this.gradients.send(expectSize(dx, module.boundarySize, 'backward'), s - 1)));
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
    await this.activations.destroy();
    await this.gradients.destroy();
  }
}

function expectSize(x: Float32Array | null, size: number, what: string): Float32Array {
  if (!x || x.length !== size) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `pipeline stage ${what} must return ${size} elements for its neighbour, returned ${x ? x.length : 'nothing'}`);
  }
  return x;
}
