/**
 * The cross-rank control traffic of a save (barrier, the exchange of shard
 * records, rank 0's verdict) on the checkpoint sub-communicator, with the
 * communicator's object exchange (allGatherObject, broadcastObject). A rank that dies mid-save breaks its connections: the
 * survivors' collective fails at once (Gloo: ERR_PEER_LOST; NCCL: the
 * watchdog's ncclRemoteError), and the save fails with that code and a message
 * saying which step and which phase, instead of waiting out a timeout.
 */
import type { Communicator } from '../comm/communicator.js';
import { NcclNodeError, isNcclNodeError, type ErrorCode } from '../errors.js';
import type { RankRecord } from './commit.js';

export type Phase = 'barrier' | 'exchange' | 'commit verdict';

export class SaveCoordinator {
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

  /** Every rank's record, in rank order, on every rank. */
  async exchange(mine: RankRecord): Promise<RankRecord[]> {
    const comm = this.#comm;
    if (!comm) return [mine];
    return this.#guard('exchange', async () => {
      return comm.allGatherObject(mine);
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
        return (await comm.broadcastObject(ok, { root: 0 })) === true;
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
