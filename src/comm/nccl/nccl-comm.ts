/**
 * The NativeComm the Communicator gets on the NCCL backend: the addon's communicator
 * plus its control block. A call made inside group() carries its group membership
 * with the op itself (native Op::group); the group's end is an op of its own.
 */
import type { NativeBuffer, NativeComm } from '../../native.js';
import { GroupFlag, OpKind } from '../../native.js';
import type { NativeNcclControl } from '../../native/contract.js';
import { recordOp } from '../flight-record.js';

/** native/core/op.h Op::Group, as the contract declares it. */
export { GroupFlag };

/** The communicators that got calls in the group() callback running now, if any. */
export const pending: { group: Set<NcclComm> | undefined } = { group: undefined };

export class NcclComm implements NativeComm {
  readonly #native: NativeComm;
  readonly control: NativeNcclControl;

  constructor(native: NativeComm, control: NativeNcclControl) {
    this.#native = native;
    this.control = control;
  }

  get rank() { return this.#native.rank; }
  get size() { return this.#native.size; }
  get backend() { return this.#native.backend; }
  get version() { return this.#native.version; }
  get inFlight() { return this.#native.inFlight; }
  get state() { return this.#native.state; }
  get supportsShrink() { return this.#native.supportsShrink === true; }

  /** ncclCommShrink; the new communicator gets its control block as a split child does. */
  shrink(excludeRanks: readonly number[], abort: boolean, timeoutMs: number): Promise<NativeComm> {
    // Called synchronously, so a refused argument throws here, as the other calls do.
    return this.#native.shrink!(excludeRanks, abort, timeoutMs).then((child) => {
      const ctl = this.control.takeChild();
      return ctl ? new NcclComm(child, ctl) : child;
    });
  }

  submit(
    kind: number, dtype: number, redop: number, send: NativeBuffer | undefined, recv: NativeBuffer | undefined,
    count: number, rootOrPeer: number, timeoutMs: number, color?: number, key?: number,
    sendCounts?: readonly number[], recvCounts?: readonly number[], preMulScalar?: number, group?: number,
  ): Promise<NativeComm | null | undefined> | undefined {
    const members = kind === OpKind.split ? undefined : pending.group;
    const flag = group ?? (members ? GroupFlag.member : GroupFlag.none);
    const p = this.#native.submit(kind, dtype, redop, send, recv, count, rootOrPeer, timeoutMs, color, key,
      sendCounts, recvCounts, preMulScalar, flag);
    if (flag === GroupFlag.member) members?.add(this);
    if (kind !== OpKind.split || p === undefined) return p;
    // A split child gets its own control block, queued natively in split order.
    return p.then((child) => {
      if (!child) return child;
      const ctl = this.control.takeChild();
      return ctl ? new NcclComm(child, ctl) : child;
    });
  }

  /** Closes this communicator's part of a group: an op that runs ncclGroupEnd and completes with the group. */
  endGroup(timeoutMs: number): Promise<unknown> {
    const p = this.#native.submit(OpKind.barrier, 1, 0, undefined, undefined, 0, -1, timeoutMs, undefined, undefined,
      undefined, undefined, undefined, GroupFlag.end) ?? Promise.resolve();
    // It takes a collective sequence number natively: the flight record counts it too.
    recordOp(this, 'groupEnd', 0, 'uint8', -1, p);
    return p;
  }

  stampInto(stamps: Float64Array): void { this.#native.stampInto?.(stamps); }
  abort(): void { this.#native.abort(); }
  destroy(): Promise<void> { return this.#native.destroy(); }
}
