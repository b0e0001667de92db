/**
 * The NativeComm the Communicator gets on the NCCL backend: the addon's communicator
 * plus its control block. Every submission gets an ordinal (the native backend
 * counts the same way), so group() and the pre-multiplied sum can tag an upcoming
 * op without changing the core submit() signature.
 */
import type { NativeBuffer, NativeComm } from '../native.js';
import { OpKind } from '../native.js';
import type { NativeNcclControl } from './native-types.js';

/** Matches native/nccl/nccl_control.h OpTag::Kind. */
export const TagKind = { none: 0, inGroup: 1, groupEnd: 2 } as const;

/** Set by group() / the pre-multiplied-sum helpers for the next submissions. */
export const pending: { group: Set<NcclComm> | undefined; preMulSum: number | undefined } = {
  group: undefined,
  preMulSum: undefined,
};

export class NcclComm implements NativeComm {
  readonly #native: NativeComm;
  readonly control: NativeNcclControl;
  #ordinal = 0;

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

  submit(
    kind: number, dtype: number, redop: number, send: NativeBuffer | undefined, recv: NativeBuffer | undefined,
    count: number, rootOrPeer: number, timeoutMs: number, color?: number, key?: number,
    sendCounts?: readonly number[], recvCounts?: readonly number[],
  ): Promise<NativeComm | null | undefined> {
    const scalar = pending.preMulSum;
    pending.preMulSum = undefined;
    const grouped = pending.group !== undefined && kind !== OpKind.split;
    return this.#submitTagged(grouped ? TagKind.inGroup : TagKind.none, scalar,
      () => this.#native.submit(kind, dtype, redop, send, recv, count, rootOrPeer, timeoutMs, color, key, sendCounts,
        recvCounts),
      kind === OpKind.split, grouped);
  }

  /** Closes this communicator's part of a group: a marker op that runs ncclGroupEnd and waits. */
  endGroup(timeoutMs: number): Promise<unknown> {
    return this.#submitTagged(TagKind.groupEnd, undefined,
      () => this.#native.submit(OpKind.barrier, 1, 0, undefined, undefined, 0, -1, timeoutMs), false, false);
  }

  #submitTagged(kind: number, scalar: number | undefined, submit: () => Promise<NativeComm | null | undefined>,
    isSplit: boolean, grouped: boolean): Promise<NativeComm | null | undefined> {
    const ordinal = this.#ordinal;
    const tagged = kind !== TagKind.none || scalar !== undefined;
    if (tagged) this.control.tag(ordinal, kind, scalar);
    let p: Promise<NativeComm | null | undefined>;
    try {
      p = submit();
    } catch (err) {
      if (tagged) this.control.untag(ordinal);
      throw err;
    }
    this.#ordinal++;
    if (grouped) pending.group!.add(this);
    if (!isSplit) return p;
    // A split child gets its own control block, queued natively in split order.
    return p.then((child) => {
      if (!child) return child;
      const ctl = this.control.takeChild();
      return ctl ? new NcclComm(child, ctl) : child;
    });
  }

  abort(): void { this.#native.abort(); }
  destroy(): Promise<void> { return this.#native.destroy(); }
}
