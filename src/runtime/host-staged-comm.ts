/**
 * Host-array collectives on an NCCL communicator, for code that computes on host
 * Float32Arrays inside a device run (the GPT's layers: tensor-parallel
 * collectives, a pipeline's activations). NCCL reads and writes device memory
 * only, so each call copies its input into a DeviceBuffer, runs the NCCL
 * operation on it, copies the result back and frees the buffers.
 *
 * The copies are asynchronous and a pipeline does not await its sends, so two
 * calls could otherwise reach NCCL in the order their copies finish: every call
 * goes through one SubmitQueue, and NCCL sees the operations in call order, as
 * every rank must submit them. As with any Communicator call, an input must stay
 * unchanged until the returned promise settles (its copy may start later).
 */
import type { Communicator } from '../comm/communicator.js';
import type { ReduceOp } from '../dtypes.js';
import { DeviceBuffer } from '../gpu/device-buffer.js';
import { SubmitQueue } from './storage.js';

type HostArray = Float32Array | Float64Array;

export class HostStagedComm {
  readonly #q = new SubmitQueue();

  constructor(readonly comm: Communicator) {}

  get rank(): number {
    return this.comm.rank;
  }

  get size(): number {
    return this.comm.size;
  }

  allReduce(buf: HostArray, options: { op: ReduceOp }): Promise<void> {
    return this.#staged([buf], [], ([d]) => [this.comm.allReduce(d!, { op: options.op }), [[d!, buf]]]);
  }

  reduceScatter(send: HostArray, recv: HostArray, options: { op: ReduceOp }): Promise<void> {
    return this.#staged([send], [recv], ([s, r]) => [this.comm.reduceScatter(s!, r!, { op: options.op }), [[r!, recv]]]);
  }

  allGather(send: HostArray, recv: HostArray): Promise<void> {
    return this.#staged([send], [recv], ([s, r]) => [this.comm.allGather(s!, r!), [[r!, recv]]]);
  }

  send(buf: HostArray, peer: number): Promise<void> {
    return this.#staged([buf], [], ([d]) => [this.comm.send(d!, peer), []]);
  }

  recv(buf: HostArray, peer: number): Promise<void> {
    return this.#staged([], [buf], ([d]) => [this.comm.recv(d!, peer), [[d!, buf]]]);
  }

  /** Collective: a sub-communicator, staged the same way (null for a rank outside every group, color -1). */
  async split(options: { color: number; key?: number }): Promise<HostStagedComm | null> {
    await this.#q.drained();
    const child = await this.comm.split(options);
    return child ? new HostStagedComm(child) : null;
  }

  async destroy(): Promise<void> {
    await this.#q.drained();
    await this.comm.destroy();
  }

  /**
   * Copies `inputs` to new DeviceBuffers and allocates ones for `outputs` (in that
   * order), submits `op` on them in queue order, then copies its results back.
   */
  #staged(inputs: HostArray[], outputs: HostArray[],
    op: (bufs: DeviceBuffer[]) => [PromiseLike<unknown>, Array<[DeviceBuffer, HostArray]>]): Promise<void> {
    let bufs: DeviceBuffer[] = [];
    return this.#q.run(async () => {
      bufs = [
        ...(await Promise.all(inputs.map((a) => DeviceBuffer.from(a)))),
        ...outputs.map((a) => DeviceBuffer.alloc({ dtype: a instanceof Float64Array ? 'float64' : 'float32', length: a.length })),
      ];
      const [work, back] = op(bufs);
      const done = Promise.resolve(work).then(async () => {
        for (const [d, host] of back) await d.copyTo(host);
      }).finally(() => {
        for (const b of bufs) b.dispose();
      });
      return { done };
    });
  }
}
