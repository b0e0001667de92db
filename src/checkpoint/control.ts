/**
 * The cross-rank control traffic of a save (barrier, the exchange of shard
 * records, rank 0's verdict) on the checkpoint sub-communicator. On NCCL the
 * few bytes travel in small DeviceBuffers (NCCL takes no host memory); on Gloo
 * as they are. A rank that dies mid-save breaks its connections: the
 * survivors' collective fails at once (Gloo: ERR_PEER_LOST; NCCL: the
 * watchdog's ncclRemoteError), and the save fails with that code and a message
 * saying which step and which phase, instead of waiting out a timeout.
 */
import type { Communicator } from '../comm/communicator.js';
import type { HostArray } from '../dtypes.js';
import { NcclNodeError, isNcclNodeError, type ErrorCode } from '../errors.js';
import { DeviceBuffer } from '../gpu/device-buffer.js';
import type { RankRecord } from './commit.js';

export type Phase = 'barrier' | 'exchange' | 'commit verdict';

export class Control {
  readonly #comm: Communicator | null;
  readonly #step: number;
  readonly #dir: string;

  constructor(comm: Communicator | null, step: number, dir: string) {
    this.#comm = comm && comm.size > 1 ? comm : null;
    this.#step = step;
    this.#dir = dir;
  }

  /** Every rank has un-committed the step directory before any shard is written. */
  async barrier(): Promise<void> {
    const comm = this.#comm;
    if (comm) await this.#guard('barrier', async () => { await comm.barrier(); });
  }

  /** Every rank's record, in rank order, on every rank (variable-length JSON over two allGathers). */
  async exchange(mine: RankRecord): Promise<RankRecord[]> {
    const comm = this.#comm;
    if (!comm) return [mine];
    return this.#guard('exchange', async () => {
      const bytes = new TextEncoder().encode(JSON.stringify(mine));
      const lens = new Int32Array(comm.size);
      await allGather(comm, new Int32Array([bytes.length]), lens);
      const max = Math.max(...lens);
      const send = new Uint8Array(max);
      send.set(bytes);
      const all = new Uint8Array(max * comm.size);
      await allGather(comm, send, all);
      const dec = new TextDecoder();
      return Array.from(lens, (n, r) => JSON.parse(dec.decode(all.subarray(r * max, r * max + n))) as RankRecord);
    });
  }

  /**
   * Rank 0's verdict (true: committed) reaches every rank. A rank that loses it
   * (rank 0 died, maybe after its commit was durable) asks `fromDisk` instead, so
   * what it reports matches what a later load finds.
   */
  async verdict(ok: boolean, fromDisk: () => Promise<boolean>): Promise<boolean> {
    const comm = this.#comm;
    if (!comm) return ok;
    try {
      return await this.#guard('commit verdict', async () => {
        const status = new Int32Array([ok ? 1 : 0]);
        await broadcast(comm, status);
        return status[0] === 1;
      });
    } catch (err) {
      if (await fromDisk()) return true;
      throw err;
    }
  }

  async #guard<T>(phase: Phase, f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (err) {
      throw lostDuring(err, phase, this.#step, this.#dir);
    }
  }
}

/** ncclRemoteError (a peer's process or connection went away) reads as a lost peer. */
function codeOf(err: NcclNodeError): ErrorCode {
  if (err.code === 'ERR_NCCL' && /remote|peer/i.test(err.message)) return 'ERR_PEER_LOST';
  return err.code;
}

export function lostDuring(err: unknown, phase: Phase, step: number, dir: string): unknown {
  if (!isNcclNodeError(err)) return err;
  const code = codeOf(err);
  const why = code === 'ERR_PEER_LOST' ? 'a rank died or left during the save' : `the ${phase} failed`;
  return new NcclNodeError(code, `checkpoint step ${step} not committed: ${why} (in the ${phase}): ${err.message}`, {
    step, dir, phase, cause: err.code,
  });
}

async function allGather(comm: Communicator, send: HostArray, recv: HostArray): Promise<void> {
  if (comm.backend !== 'nccl') {
    await comm.allGather(send, recv);
    return;
  }
  const s = await DeviceBuffer.from(send);
  const r = DeviceBuffer.alloc({ dtype: s.dtype, length: recv.length });
  try {
    await comm.allGather(s, r);
    await r.copyTo(recv);
  } finally {
    s.dispose();
    r.dispose();
  }
}

async function broadcast(comm: Communicator, buf: HostArray): Promise<void> {
  if (comm.backend !== 'nccl') {
    await comm.broadcast(buf, { root: 0 });
    return;
  }
  const d = await DeviceBuffer.from(buf);
  try {
    await comm.broadcast(d, { root: 0 });
    await d.copyTo(buf);
  } finally {
    d.dispose();
  }
}
