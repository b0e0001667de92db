/**
 * The communicator: torch.distributed's collectives, camelCased, on TypedArrays
 * (Gloo) and device buffers (NCCL). Each call checks its arguments here, then
 * queues one native operation and returns a Work. Calls run in issue order on the
 * communicator's own native thread; the JS thread keeps running.
 */
import { performance } from 'node:perf_hooks';
import {
  DTYPE_CODE,
  REDUCE_OP_CODE,
  dtypeOf,
  lengthOf,
  type DType,
  type DeviceLike,
  type HostArray,
  type ReduceOp,
} from '../dtypes.js';
import { NcclNodeError } from '../errors.js';
import { OpKind, nativeHandle, type NativeBuffer, type NativeComm, type OpName } from '../native.js';
import {
  allReduceSchema,
  allToAllSchema,
  barrierSchema,
  commonSchema,
  parse,
  reduceSchema,
  reduceScatterSchema,
  rootedSchema,
  rootOnly,
  splitSchema,
  type AllReduceOptions,
  type AllToAllOptions,
  type BarrierOptions,
  type CommonOptions,
  type ReduceOptions,
  type ReduceScatterOptions,
  type RootedOptions,
  type SplitOptions,
} from './call-options.js';
import { Work } from './work.js';
import { PreparedAllReduce, recordBlockingAllReduce } from './prepared.js';
import { RepeatedCalls, type Slot } from './repeated-calls.js';
import { registerBuffer, registerPinned, type Registration, type RegisterOptions } from './nccl/register.js';
import type { DeviceBuffer, PinnedHostBuffer } from '../gpu/device-buffer.js';
import { collectiveBytes, collectiveEnded, collectiveStarted, type CollectiveClock } from '../metrics/collectives.js';
import { flightRecord, recordOp, type FlightRecord } from './flight-record.js';
import { MONOTONIC_ORIGIN_MS } from './monotonic.js';

/** What a collective reads or writes: host TypedArrays, or device buffers on the GPU path. */
export type Buffer = HostArray | DeviceLike;

/** Anything with a native handle (device buffers) hands it over here; defined in native/contract.ts. */
export { nativeHandle };

/** A call made without options: one shared empty object rather than one per call. */
const NO_OPTIONS: { dtype?: undefined; out?: undefined; op?: undefined; timeoutMs?: undefined } = Object.freeze({});

function toNative(buf: Buffer | undefined): NativeBuffer | undefined {
  if (buf === undefined) return undefined;
  // A host array carries no handle: skip the symbol lookup, a slow property miss on typed arrays.
  if (ArrayBuffer.isView(buf)) return buf as ArrayBufferView;
  const handle = (buf as { [nativeHandle]?: NativeBuffer })[nativeHandle];
  return handle ?? (buf as unknown as NativeBuffer);
}

interface Submission {
  send?: Buffer | undefined;
  recv?: Buffer | undefined;
  count: number;
  dtype: DType;
  op?: ReduceOp | undefined;
  root?: number;
  timeoutMs?: number | undefined;
  color?: number;
  key?: number;
  sendCounts?: number[];
  recvCounts?: number[];
  /** NCCL's pre-multiplied sum: the sum of preMulScalar * each rank's input. */
  preMulScalar?: number;
}

/** A blocking all-reduce's checked arguments. */
interface BlockingCall<B extends HostArray> {
  dtype: DType;
  count: number;
  recv: B;
  op: ReduceOp | undefined;
  timeoutMs: number | undefined;
}

export interface CommunicatorInit {
  native: NativeComm;
  timeoutMs: number;
  localRank?: number;
  localSize?: number;
  /** Capture the caller's stack at each call (default: NCCL_NODE_CALLER_STACKS=1). */
  callerStacks?: boolean;
  /** Called once after destroy() or abort() (closes the store the world communicator owns). */
  onClose?: () => Promise<void> | void;
  /** Turns an operation's error into the one its Work rejects with (names a failed peer; see heartbeat.ts). */
  explainFailure?: ((err: unknown) => Promise<unknown>) | undefined;
}

export class Communicator {
  readonly rank: number;
  readonly size: number;
  /** 'gloo' or 'nccl'. */
  readonly backend: string;
  /** Version of the backend library, e.g. "gloo 0.5.0". */
  readonly backendVersion: string;
  readonly localRank: number;
  readonly localSize: number;
  /** Default deadline of each operation, in ms. */
  readonly timeoutMs: number;
  readonly #native: NativeComm;
  readonly #onClose: (() => Promise<void> | void) | undefined;
  readonly #callerStacks: boolean;
  #closed: 'destroyed' | 'aborted' | undefined;
  #abortReason: NcclNodeError | undefined;
  readonly #explain: ((err: unknown) => Promise<unknown>) | undefined;
  #children = new Set<Communicator>();
  /** Unsettled works, so abort() can fail them at once. */
  #pending = new Set<Work<unknown>>();
  /** " on rank R of N", made once: every call names itself with it. */
  readonly #onRank: string;
  /** flightRecord(#native), looked up on first use (a split names its child's record first). */
  #record: FlightRecord | undefined;
  /** Where the native calls leave their entry and exit times (NativeComm.stampInto); undefined: read the clock here. */
  readonly #stamps: Float64Array | undefined;
  /** `allReduce on rank R of N`, the name allReduce's refusals carry, made once. */
  readonly #whereAllReduce: string;
  /** When this communicator's last operation ended, for the collective totals (metrics/collectives.ts). */
  readonly #clock: CollectiveClock = { lastEnd: 0 };
  /** allReduce's and allReduceSync's recent calls on host arrays, prepared when repeated (repeated-calls.ts); undefined when off. */
  readonly #repeated: RepeatedCalls | undefined;

  constructor(init: CommunicatorInit) {
    this.#native = init.native;
    this.rank = init.native.rank;
    this.size = init.native.size;
    this.#onRank = ` on rank ${this.rank} of ${this.size}`;
    this.#whereAllReduce = `allReduce${this.#onRank}`;
    if (typeof init.native.stampInto === 'function') {
      const stamps = new Float64Array(2);
      init.native.stampInto(stamps);
      this.#stamps = stamps;
    }
    this.backend = init.native.backend;
    this.backendVersion = init.native.version;
    this.localRank = init.localRank ?? this.rank;
    this.localSize = init.localSize ?? this.size;
    this.timeoutMs = init.timeoutMs;
    this.#onClose = init.onClose;
    this.#callerStacks = init.callerStacks ?? process.env.NCCL_NODE_CALLER_STACKS === '1';
    this.#explain = init.explainFailure;
    // A native communicator without prepared calls (a test double) remembers nothing. On
    // NCCL, whose calls complete on the device, preparing a remembered call is refused
    // (once: the slot keeps the refusal) and the call keeps the full path.
    this.#repeated = process.env.NCCL_NODE_PREPARE_REPEATED === '0' || !init.native.prepareSync
      ? undefined : new RepeatedCalls();
  }

  /** Operations queued or running. */
  get inFlight(): number {
    return this.#native.inFlight;
  }

  /** The last operations of this communicator (src/comm/flight-record.ts). */
  get flightRecord(): FlightRecord {
    return (this.#record ??= flightRecord(this.#native));
  }

  /** 'ok', or why the communicator can no longer be used. */
  get state(): NativeComm['state'] {
    return this.#native.state;
  }

  /**
   * Reduces `buf` across ranks into `buf`, or into `out` when given.
   *
   * A call on a host array made again on the same memory with the same options (up to
   * 64 KiB an array, not resizable), on a backend that prepares calls (Gloo), is prepared
   * the second time and made as that prepared call's start() from then on, as
   * allReduceSync's are (repeated-calls.ts): the same call, in the same sequence, without
   * checking and converting its arguments again. NCCL_NODE_PREPARE_REPEATED=0 turns this off.
   */
  allReduce(buf: Buffer, options?: AllReduceOptions<Buffer>): Work {
    const repeated = this.#closed === undefined ? this.#repeated : undefined;
    if (repeated === undefined) return this.#allReduce(buf, options, undefined);
    const host = buf as HostArray;
    const hostOptions = options as AllReduceOptions<HostArray> | undefined;
    const slot = repeated.find(host, hostOptions);
    if (slot !== undefined && slot.call === undefined) this.#prepareRepeated(slot, host, hostOptions, undefined);
    if (slot?.call) return repeated.start(slot);
    const work = this.#allReduce(buf, options, undefined);
    if (!slot && ArrayBuffer.isView(buf)) repeated.remember(host, hostOptions);
    return work;
  }

  #allReduce(buf: Buffer, options: AllReduceOptions<Buffer> | undefined, preMulScalar: number | undefined): Work {
    // #guard's try inline, without its closure: the most frequent call of all.
    try {
      const where = this.#whereAllReduce;
      const o = options ? parse(allReduceSchema, options, where) : NO_OPTIONS;
      const dtype = dtypeOf(buf, o.dtype, where);
      const count = lengthOf(buf, dtype);
      const out = o.out as Buffer | undefined;
      if (out !== undefined) this.#expectLength('allReduce', 'out', out, dtype, count, 'the input length');
      return this.#submit('allReduce', { send: buf, recv: out ?? buf, count, dtype, op: o.op, timeoutMs: o.timeoutMs, preMulScalar });
    } catch (err) {
      this.#refuse('allReduce', -1, err);
    }
  }

  /**
   * allReduce that blocks: returns when every rank has contributed, with the result
   * in `options.out` (returned) or in `buf` (returned). For small host arrays (a loss,
   * a norm, a stop flag) where an awaited call's promise and thread hand-offs cost
   * more than the exchange itself: within a host, over shared memory, the call runs
   * on this thread with no promise and no hand-off (bench/shm/allreduce.ts, docs/gloo.md).
   *
   * Host arrays on a Gloo communicator only (NCCL's operations complete on the
   * device: ERR_UNAVAILABLE). Calls issued before it and still in flight run first,
   * as on every rank; their Works settle after this returns, their results already
   * in place. A refused call (bad arguments) still tells the other ranks, which fail
   * the same call. The event loop waits with the call, up to `timeoutMs` when a peer
   * is late (plus what runs before it): timers, heartbeats and signal handlers too.
   * Failures throw as allReduce()'s reject, without the failure's explanation from
   * the rendezvous store, which would need the event loop.
   *
   * A call made again on the same memory with the same options (up to 64 KiB an array,
   * not resizable) is prepared the second time, as prepareAllReduce() would, and made
   * as that prepared call from then on (repeated-calls.ts); the communicator then holds
   * that memory until 8 other calls have displaced it, or until destroy() or abort().
   * allReduce() shares these 8 calls. NCCL_NODE_PREPARE_REPEATED=0 turns this off.
   */
  allReduceSync<B extends HostArray>(buf: B, options?: AllReduceOptions<B>): B {
    // The same call as one made before on this memory: its prepared form (repeated-calls.ts).
    const repeated = this.#closed === undefined ? this.#repeated : undefined;
    const slot = repeated?.find(buf, options);
    if (slot?.call) return repeated!.run(slot, (options?.out ?? buf) as B);
    const c = this.#blockingCall('allReduceSync', buf, options);
    if (slot && slot.call === undefined) {
      if (this.#prepareRepeated(slot, buf, options, c)) return repeated!.run(slot, c.recv);
    } else if (!slot) {
      repeated?.remember(buf, options);
    }
    const stamps = this.#stamps;
    const before = stamps === undefined ? collectiveStarted() : 0;
    let failed = false;
    let error: unknown;
    try {
      // A refusal from here on (the backend, the memory) is the native side's: it
      // leaves the stand-in that tells the other ranks itself.
      this.#native.submitSync!(
        OpKind.allReduce, DTYPE_CODE[c.dtype], REDUCE_OP_CODE[c.op ?? 'sum'], buf, c.recv, c.count, -1,
        c.timeoutMs ?? this.timeoutMs,
      );
    } catch (err) {
      failed = true;
      error = err;
    }
    const started = stamps === undefined ? before : stamps[0]! - MONOTONIC_ORIGIN_MS;
    const ended = stamps === undefined ? performance.now() : stamps[1]! - MONOTONIC_ORIGIN_MS;
    recordBlockingAllReduce(this.flightRecord, this.#clock, c.count, c.dtype,
      collectiveBytes('allReduce', c.count, c.dtype, this.size), started, ended, failed, error);
    return c.recv;
  }

  /** @internal What the repeated-call memory of allReduce and allReduceSync did (tests); undefined when it is off. */
  get _repeatedCalls(): RepeatedCalls['stats'] | undefined {
    return this.#repeated?.stats;
  }

  /**
   * A call seen a second time is prepared now and made as the prepared call from then on;
   * one that cannot be (a refusal, for this rank alone) is left to the full path, now and
   * later (the slot remembers it failed). `c`: the call's arguments when already checked.
   */
  #prepareRepeated<B extends HostArray>(slot: Slot, buf: B, options: AllReduceOptions<B> | undefined,
    c: BlockingCall<B> | undefined): boolean {
    let call: PreparedAllReduce<HostArray> | null = null;
    try {
      call = this.#prepare(buf, c ?? this.#blockingCall('prepareAllReduce', buf, options, false));
    } catch {
      // The full path makes the call, and refuses it if it must.
    }
    this.#repeated!.keep(slot, call);
    return call !== null;
  }

  /**
   * allReduceSync() checked once, for a call made again and again on the same arrays
   * (a loss or a norm every step): each run() of the returned PreparedAllReduce is
   * that call, with no argument to check or convert (within a host about a third of
   * allReduceSync's time: bench/shm/allreduce.ts). It holds the arrays' memory until
   * free(); a resizable ArrayBuffer is refused (it could shrink between runs).
   * Preparing is local: it takes no place in the communicator's sequence, and a
   * refusal here (ERR_INVALID_ARGUMENT, ERR_UNAVAILABLE on NCCL) concerns this rank alone.
   */
  prepareAllReduce<B extends HostArray>(buf: B, options?: AllReduceOptions<B>): PreparedAllReduce<B> {
    return this.#prepare(buf, this.#blockingCall('prepareAllReduce', buf, options, false));
  }

  #prepare<B extends HostArray>(buf: B, c: BlockingCall<B>): PreparedAllReduce<B> {
    const stamps = new Float64Array(2);
    const native = this.#native.prepareSync!(
      OpKind.allReduce, DTYPE_CODE[c.dtype], REDUCE_OP_CODE[c.op ?? 'sum'], buf, c.recv, c.count, -1,
      c.timeoutMs ?? this.timeoutMs, stamps,
    );
    const bytes = collectiveBytes('allReduce', c.count, c.dtype, this.size);
    // start()'s Work, as a submitted call's: recorded, tracked, its failure explained.
    const workOf = (started: Promise<unknown>, submitted: number, ended: number): Work =>
      this.#workOf('allReduce', started, c.count, c.dtype, -1, bytes, submitted, ended,
        this.#callerStacks ? new Error('allReduce') : undefined);
    return new PreparedAllReduce(native, stamps, this.#clock, this.flightRecord, c.recv, c.count, c.dtype, bytes, workOf);
  }

  // allReduceSync's and prepareAllReduce's checks, inline rather than in #guard's closure:
  // this call is made for its microsecond, and the closure and the object it returned
  // took about 5 % of it at one rank. A refused blocking call tells the other ranks
  // (tell); a refused preparation has nobody to tell.
  #blockingCall<B extends HostArray>(call: string, buf: B, options: AllReduceOptions<B> | undefined, tell = true): BlockingCall<B> {
    try {
      const o = options ? parse(allReduceSchema, options, this.#where('allReduce')) : undefined;
      if (!ArrayBuffer.isView(buf)) {
        throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${this.#where('allReduce')}: ${call} takes a host array, received a device buffer`);
      }
      const dtype = dtypeOf(buf, o?.dtype, this.#where('allReduce'));
      const count = lengthOf(buf, dtype);
      const out = o?.out as B | undefined;
      if (out !== undefined) this.#expectLength('allReduce', 'out', out, dtype, count, 'the input length');
      this.#checkOpen('allReduce');
      if (!this.#native.submitSync || !this.#native.prepareSync) {
        throw new NcclNodeError('ERR_UNAVAILABLE', `${this.#where('allReduce')}: the ${this.#native.backend} backend does not run ` +
          'blocking calls (its operations complete on the device); await allReduce() instead');
      }
      return { dtype, count, recv: out ?? buf, op: o?.op, timeoutMs: o?.timeoutMs };
    } catch (err) {
      if (!tell) throw err;
      this.#refuse('allReduce', -1, err);
    }
  }

  /**
   * @internal allReduce / reduceScatter as a sum of `scalar` * each rank's input,
   * the scalar carried with the op (comm/nccl/group.ts: allReducePreMulSum, reduceScatterPreMulSum).
   */
  _preMulSum(call: 'allReduce' | 'reduceScatter', input: Buffer, output: Buffer | undefined, scalar: number,
    options: { out?: Buffer; timeoutMs?: number }): Work {
    if (typeof scalar !== 'number' || !Number.isFinite(scalar)) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${this.#where(call)}: the pre-multiplier must be a finite number, received ${String(scalar)}`);
    }
    if (call === 'allReduce') return this.#allReduce(input, { op: 'sum', ...options }, scalar);
    return this.#reduceScatter(input, output!, { op: 'sum', timeoutMs: options.timeoutMs }, scalar);
  }

  /** Copies `buf` from `root` (default 0) to every rank. */
  broadcast(buf: Buffer, options?: RootedOptions): Work {
    return this.#guard('broadcast', -1, () => {
      const o = options ? (rootOnly(options) ?? parse(rootedSchema, options, this.#where('broadcast'))) : {};
      const dtype = dtypeOf(buf, o.dtype, this.#where('broadcast'));
      const root = this.#root('broadcast', o.root);
      return this.#submit('broadcast', { send: buf, recv: buf, count: lengthOf(buf, dtype), dtype, root, timeoutMs: o.timeoutMs });
    });
  }

  /** Reduces `buf` from every rank into `root`'s `buf` (or `out`); other ranks' buffers are unchanged. */
  reduce(buf: Buffer, options?: ReduceOptions<Buffer>): Work {
    return this.#guard('reduce', -1, () => {
      const o = options ? (rootOnly(options, true) ?? parse(reduceSchema, options, this.#where('reduce'))) : {};
      const dtype = dtypeOf(buf, o.dtype, this.#where('reduce'));
      const root = this.#root('reduce', o.root);
      const count = lengthOf(buf, dtype);
      const out = o.out as Buffer | undefined;
      if (out !== undefined && this.rank === root) this.#expectLength('reduce', 'out', out, dtype, count, 'the input length');
      return this.#submit('reduce', { send: buf, recv: this.rank === root ? (out ?? buf) : buf, count, dtype, op: o.op, root, timeoutMs: o.timeoutMs });
    });
  }

  /** Concatenates every rank's `input` into `output` (size x input length), in rank order. */
  allGather(input: Buffer, output: Buffer, options?: CommonOptions): Work {
    return this.#guard('allGather', -1, () => {
      const o = options ? parse(commonSchema, options, this.#where('allGather')) : {};
      const dtype = dtypeOf(input, o.dtype, this.#where('allGather'));
      const count = lengthOf(input, dtype);
      this.#expectLength('allGather', 'output', output, dtype, count * this.size, `${this.size} ranks x ${count} input elements`);
      return this.#submit('allGather', { send: input, recv: output, count, dtype, timeoutMs: o.timeoutMs });
    });
  }

  /** Reduces `input` (size x output length) across ranks; rank r receives block r in `output`. */
  reduceScatter(input: Buffer, output: Buffer, options?: ReduceScatterOptions): Work {
    return this.#reduceScatter(input, output, options, undefined);
  }

  #reduceScatter(input: Buffer, output: Buffer, options: ReduceScatterOptions | undefined, preMulScalar: number | undefined): Work {
    return this.#guard('reduceScatter', -1, () => {
      const o = options ? parse(reduceScatterSchema, options, this.#where('reduceScatter')) : {};
      const dtype = dtypeOf(output, o.dtype, this.#where('reduceScatter'));
      const count = lengthOf(output, dtype);
      this.#expectLength('reduceScatter', 'input', input, dtype, count * this.size, `${this.size} ranks x ${count} output elements`);
      return this.#submit('reduceScatter', { send: input, recv: output, count, dtype, op: o.op, timeoutMs: o.timeoutMs, preMulScalar });
    });
  }

  /**
   * Block j of rank i's `input` lands in block i of rank j's `output`. Equal blocks
   * (lengths divide by size), or with `{ sendCounts, recvCounts }` per-peer element
   * counts, blocks packed in rank order (torch's all_to_all_single with split
   * sizes); rank i's sendCounts[j] must equal rank j's recvCounts[i].
   */
  allToAll(input: Buffer, output: Buffer, options?: AllToAllOptions): Work {
    return this.#guard('allToAll', -1, () => {
      const where = this.#where('allToAll');
      const o = options ? parse(allToAllSchema, options, where) : {};
      const dtype = dtypeOf(input, o.dtype, where);
      const count = lengthOf(input, dtype);
      if (o.sendCounts && o.recvCounts) return this.#allToAllV(input, output, dtype, o.sendCounts, o.recvCounts, o.timeoutMs);
      this.#expectLength('allToAll', 'output', output, dtype, count, 'the input length');
      if (count % this.size !== 0) {
        throw new NcclNodeError(
          'ERR_SIZE_MISMATCH',
          `${where}: the input length must be a multiple of the world size ${this.size}, received ${count} elements`,
        );
      }
      return this.#submit('allToAll', { send: input, recv: output, count, dtype, timeoutMs: o.timeoutMs });
    });
  }

  /** Concatenates every rank's `input` into `root`'s `output`; `output` is ignored elsewhere. */
  gather(input: Buffer, output: Buffer | null | undefined, options?: RootedOptions): Work {
    return this.#guard('gather', -1, () => {
      const o = options ? (rootOnly(options) ?? parse(rootedSchema, options, this.#where('gather'))) : {};
      const dtype = dtypeOf(input, o.dtype, this.#where('gather'));
      const root = this.#root('gather', o.root);
      const count = lengthOf(input, dtype);
      const isRoot = this.rank === root;
      if (isRoot) {
        if (output == null) this.#missing('gather', 'output', root);
        this.#expectLength('gather', 'output', output, dtype, count * this.size, `${this.size} ranks x ${count} input elements`);
      }
      return this.#submit('gather', { send: input, recv: isRoot ? output! : undefined, count, dtype, root, timeoutMs: o.timeoutMs });
    });
  }

  /** Splits `root`'s `input` (size x output length) into blocks; rank r receives block r. */
  scatter(input: Buffer | null | undefined, output: Buffer, options?: RootedOptions): Work {
    return this.#guard('scatter', -1, () => {
      const o = options ? (rootOnly(options) ?? parse(rootedSchema, options, this.#where('scatter'))) : {};
      const dtype = dtypeOf(output, o.dtype, this.#where('scatter'));
      const root = this.#root('scatter', o.root);
      const count = lengthOf(output, dtype);
      const isRoot = this.rank === root;
      if (isRoot) {
        if (input == null) this.#missing('scatter', 'input', root);
        this.#expectLength('scatter', 'input', input, dtype, count * this.size, `${this.size} ranks x ${count} output elements`);
      }
      return this.#submit('scatter', { send: isRoot ? input! : undefined, recv: output, count, dtype, root, timeoutMs: o.timeoutMs });
    });
  }

  /** Sends `buf` to `peer`, which must post a matching recv of the same length and dtype. */
  send(buf: Buffer, peer: number, options?: CommonOptions): Work {
    return this.#guard('send', peer, () => this.#p2p('send', buf, peer, options));
  }

  /** Receives into `buf` from `peer`. */
  recv(buf: Buffer, peer: number, options?: CommonOptions): Work {
    return this.#guard('recv', peer, () => this.#p2p('recv', buf, peer, options));
  }

  /** Resolves once every rank has reached the barrier. */
  barrier(options?: BarrierOptions): Work {
    return this.#guard('barrier', -1, () => {
      const o = options ? parse(barrierSchema, options, this.#where('barrier')) : {};
      return this.#submit('barrier', { count: 0, dtype: 'uint8', timeoutMs: o.timeoutMs });
    });
  }

  /**
   * Every rank's `value` (anything JSON can carry), in rank order, on every rank, as
   * torch's all_gather_object. Two rounds: the encoded lengths, then the UTF-8 bytes
   * padded to the longest; through small device buffers on NCCL. A value JSON cannot
   * encode fails the call on every rank with ERR_INVALID_ARGUMENT naming the rank.
   */
  async allGatherObject<T = unknown>(value: T, options: { timeoutMs?: number } = {}): Promise<T[]> {
    const where = this.#where('allGatherObject');
    const mine = encodeObject(value);
    if (this.size === 1) return [decodeObject(checkEncoded(mine, 0, where), where) as T];
    const lens = new Int32Array(this.size);
    await this.#exchange('allGather', new Int32Array([mine instanceof Uint8Array ? mine.length : -1]), lens, 0, options.timeoutMs);
    const bad = lens.findIndex((n) => n < 0);
    if (bad >= 0) checkEncoded(bad === this.rank ? mine : `rank ${bad} passed a value JSON cannot encode`, bad, where);
    const width = Math.max(1, ...lens);
    const send = new Uint8Array(width);
    send.set(mine as Uint8Array);
    const all = new Uint8Array(width * this.size);
    await this.#exchange('allGather', send, all, 0, options.timeoutMs);
    return Array.from(lens, (n, r) => decodeObject(all.subarray(r * width, r * width + n), where) as T);
  }

  /**
   * `root`'s `value` (anything JSON can carry) on every rank, as torch's
   * broadcast_object_list; other ranks' `value` is ignored. Two rounds: the length,
   * then the UTF-8 bytes; through small device buffers on NCCL. Every rank gets the
   * decoded copy, root included.
   */
  async broadcastObject<T = unknown>(value: T, options: { root?: number; timeoutMs?: number } = {}): Promise<T> {
    const where = this.#where('broadcastObject');
    const root = this.#root('broadcastObject', options.root);
    if (!Number.isInteger(root) || root < 0) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${where}: root must be a rank in 0..${this.size - 1}, received ${root}`);
    }
    const mine = this.rank === root ? encodeObject(value) : new Uint8Array(0);
    if (this.size === 1) return decodeObject(checkEncoded(mine, root, where), where) as T;
    const len = new Int32Array([mine instanceof Uint8Array ? mine.length : -1]);
    await this.#exchange('broadcast', len, undefined, root, options.timeoutMs);
    if (len[0]! < 0) checkEncoded(this.rank === root ? mine : `rank ${root} passed a value JSON cannot encode`, root, where);
    const bytes = new Uint8Array(Math.max(1, len[0]!));
    if (this.rank === root) bytes.set(mine as Uint8Array);
    await this.#exchange('broadcast', bytes, undefined, root, options.timeoutMs);
    return decodeObject(bytes.subarray(0, len[0]!), where) as T;
  }

  /** A host-array collective for the object exchanges: as is on Gloo, through device memory on NCCL. */
  async #exchange(call: 'allGather' | 'broadcast', send: HostArray, recv: HostArray | undefined, root: number,
    timeoutMs: number | undefined): Promise<void> {
    if (this.backend !== 'nccl') {
      if (call === 'allGather') await this.allGather(send, recv!, { timeoutMs });
      else await this.broadcast(send, { root, timeoutMs });
      return;
    }
    // Loaded here: device-buffer.ts imports this module.
    const { DeviceBuffer } = await import('../gpu/device-buffer.js');
    const s = await DeviceBuffer.from(send);
    const r = recv ? DeviceBuffer.alloc({ dtype: s.dtype, length: recv.length }) : s;
    try {
      if (call === 'allGather') await this.allGather(s, r, { timeoutMs });
      else await this.broadcast(s, { root, timeoutMs });
      await r.copyTo(recv ?? send);
    } finally {
      s.dispose();
      if (r !== s) r.dispose();
    }
  }

  /**
   * Collective: ranks with the same `color` form a new communicator, ordered by
   * (`key`, rank); `key` defaults to the rank. A color of -1 takes no part and
   * resolves to null.
   */
  split(options: SplitOptions): Work<Communicator | null> {
    return this.#guard('split', -1, () => {
      const o = parse(splitSchema, options, this.#where('split'));
      const native = this.#start('split', {
        count: 0,
        dtype: 'uint8',
        timeoutMs: o.timeoutMs,
        color: o.color,
        key: o.key ?? this.rank,
      });
      if (native === undefined) throw new NcclNodeError('ERR_BACKEND', `${this.#where('split')}: the native split returned no promise`);
      recordOp(this.#native, 'split', 0, 'uint8', -1, native, o.color);
      const child = native.then((n) => {
        if (!n) return null;
        const comm = new Communicator({ native: n as NativeComm, timeoutMs: this.timeoutMs, callerStacks: this.#callerStacks, explainFailure: this.#explain });
        this.#children.add(comm);
        return comm;
      });
      return this.#track(new Work(child, 'split', this, this.#callerStacks ? new Error('split') : undefined));
    });
  }

  /**
   * Whether shrink() can work now: an NCCL communicator on a library with
   * ncclCommShrink (NCCL >= 2.27) whose NCCL communicator was not aborted. Gloo:
   * false (form a new communicator instead).
   */
  get supportsShrink(): boolean {
    return this.#closed === undefined && this.#native.supportsShrink === true;
  }

  /**
   * ncclCommShrink: a communicator of this one's ranks minus `excludeRanks`, the others
   * keeping their order (new rank = place among the survivors). Collective over the
   * survivors only: an excluded rank (dead, hung or leaving) does not call it. `abort`
   * (NCCL_SHRINK_ABORT) first terminates this communicator's work, failing what is in
   * flight, without waiting on any peer: what a communicator a fault left broken
   * needs. The new communicator is independent: this one stays for the caller to
   * abort or destroy. ERR_UNAVAILABLE where supportsShrink is false.
   */
  shrink(excludeRanks: readonly number[], options: { abort?: boolean; timeoutMs?: number } = {}): Work<Communicator> {
    const where = this.#where('shrink');
    if (this.#closed === 'destroyed') throw new NcclNodeError('ERR_COMM_DESTROYED', `${where}: the communicator was destroyed`);
    if (this.#closed === 'aborted') throw new NcclNodeError('ERR_COMM_ABORTED', `${where}: the communicator was aborted; form a new one instead`);
    if (!this.#native.shrink) {
      throw new NcclNodeError('ERR_UNAVAILABLE', `${where}: the ${this.backend} backend cannot shrink a communicator; form a new one instead`);
    }
    if (!Array.isArray(excludeRanks)) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${where}: excludeRanks must be an array of ranks, received ${typeof excludeRanks}`);
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    if (!Number.isInteger(timeoutMs) || timeoutMs < 1) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${where}: timeoutMs must be a positive integer, received ${String(timeoutMs)}`);
    }
    if (options.abort !== undefined && typeof options.abort !== 'boolean') {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${where}: abort must be a boolean, received ${typeof options.abort}`);
    }
    const child = this.#native.shrink(excludeRanks, options.abort ?? false, timeoutMs).then((n) =>
      new Communicator({ native: n, timeoutMs: this.timeoutMs, callerStacks: this.#callerStacks, explainFailure: this.#explain }));
    return this.#track(new Work(child, 'shrink', this, this.#callerStacks ? new Error('shrink') : undefined));
  }

  /**
   * Lets queued operations finish, then frees the communicator and any
   * sub-communicators split from it. Later calls fail with ERR_COMM_DESTROYED.
   */
  async destroy(): Promise<void> {
    if (this.#closed) return;
    this.#closed = 'destroyed';
    this.#repeated?.clear();
    await Promise.all([...this.#children].map((c) => c.destroy()));
    await this.#native.destroy();
    await this.#onClose?.();
  }

  /**
   * Fails every queued and running operation now (ERR_COMM_ABORTED, or `reason`) and
   * closes the connections, so a peer stuck in a collective with this rank fails too.
   */
  abort(reason?: NcclNodeError): void {
    if (this.#closed) return;
    this.#closed = 'aborted';
    this.#repeated?.clear();
    this.#abortReason = reason;
    for (const c of this.#children) c.abort(reason);
    this.#native.abort();
    const err = reason ?? new NcclNodeError('ERR_COMM_ABORTED', `${this.#where('abort')}: the communicator was aborted`);
    for (const w of this.#pending) w._fail(err);
    this.#pending.clear();
    void Promise.resolve(this.#onClose?.()).catch(() => {});
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.destroy();
  }

  /**
   * Registers `buf` with NCCL for zero-copy (GPUDirect) transfers, or as a symmetric
   * window with {symmetric: true}; see src/comm/nccl/register.ts. Gloo: ERR_UNAVAILABLE.
   */
  register(buf: DeviceBuffer, options?: RegisterOptions): Registration {
    return registerBuffer(this.#native, this.#where('register'), buf, options);
  }

  /** Registers page-locked host memory with NCCL (NCCL >= 2.19). Gloo: ERR_UNAVAILABLE. */
  registerHost(pinned: PinnedHostBuffer): Registration {
    return registerPinned(this.#native, this.#where('registerHost'), pinned);
  }

  /**
   * Runs a call's checks and submission. When this rank refuses the call (bad
   * arguments) while the others may have made theirs correctly, a stand-in still
   * takes its place in the sequence: it carries the reason to the other ranks in the
   * call's agreement round, so they fail the same operation naming this rank, and
   * the calls after it still line up (ERR_SIZE_MISMATCH forever otherwise). The
   * error is thrown here as before.
   */
  #guard<T>(call: OpName, peer: number, f: () => T): T {
    try {
      return f();
    } catch (err) {
      this.#refuse(call, peer, err);
    }
  }

  /** A call this rank refused: tells the other ranks (the stand-in), then throws `err`. */
  #refuse(call: OpName, peer: number, err: unknown): never {
    const code = err instanceof NcclNodeError ? err.code : 'ERR_INVALID_ARGUMENT';
    if (!this.#closed && code !== 'ERR_COMM_DESTROYED' && code !== 'ERR_COMM_ABORTED') {
      const message = err instanceof Error ? err.message : String(err);
      try {
        if (this.#native.reject) this.flightRecord.refused(call);
        this.#native.reject?.(OpKind[call], code, message, Number.isInteger(peer) ? peer : -1, this.timeoutMs);
      } catch {
        // The communicator went away under us: nobody left to tell.
      }
    }
    throw err;
  }

  #where(call: string): string {
    return call + this.#onRank;
  }

  #root(call: string, root: number | undefined): number {
    const r = root ?? 0;
    if (r >= this.size) {
      throw new NcclNodeError(
        'ERR_INVALID_ARGUMENT',
        `${this.#where(call)}: root must be a rank in 0..${this.size - 1}, received ${r}`,
      );
    }
    return r;
  }

  #missing(call: string, what: string, root: number): never {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${this.#where(call)}: the root (rank ${root}) needs an ${what} buffer, received none`);
  }

  #expectLength(call: string, what: string, buf: Buffer | null | undefined, dtype: DType, expected: number, why: string): void {
    const where = this.#where(call);
    dtypeOf(buf, dtype, `${where}: ${what}`);
    const got = lengthOf(buf as Buffer, dtype);
    if (got !== expected) {
      throw new NcclNodeError(
        'ERR_SIZE_MISMATCH',
        `${where}: ${what} holds ${got} ${dtype} elements, expected ${expected} (${why})`,
        { expected, received: got },
      );
    }
  }

  #allToAllV(input: Buffer, output: Buffer, dtype: DType, sendCounts: number[], recvCounts: number[], timeoutMs?: number): Work {
    const where = this.#where('allToAll');
    dtypeOf(output, dtype, `${where}: output`);
    if (input === output) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${where}: with per-rank counts, input and output must be different buffers`);
    }
    for (const [name, c, buf] of [['sendCounts', sendCounts, input], ['recvCounts', recvCounts, output]] as const) {
      if (c.length !== this.size) {
        throw new NcclNodeError('ERR_SIZE_MISMATCH', `${where}: ${name} has ${c.length} entries, expected one per rank (${this.size})`);
      }
      const total = c.reduce((a, b) => a + b, 0);
      const held = lengthOf(buf, dtype);
      if (total > held) {
        const what = name === 'sendCounts' ? 'input' : 'output';
        throw new NcclNodeError(
          'ERR_SIZE_MISMATCH',
          `${where}: ${name} add up to ${total} elements, the ${what} holds ${held} ${dtype} elements`,
          { expected: total, received: held },
        );
      }
    }
    // The block a rank keeps is copied locally; both sides of it are this rank's.
    if (sendCounts[this.rank] !== recvCounts[this.rank]) {
      throw new NcclNodeError(
        'ERR_SIZE_MISMATCH',
        `${where}: sendCounts[${this.rank}] (${sendCounts[this.rank]}) must equal recvCounts[${this.rank}] (${recvCounts[this.rank]}), the block this rank keeps`,
      );
    }
    const count = sendCounts.reduce((a, b) => a + b, 0);
    return this.#submit('allToAll', { send: input, recv: output, count, dtype, timeoutMs, sendCounts, recvCounts });
  }

  #p2p(call: 'send' | 'recv', buf: Buffer, peer: number, options?: CommonOptions): Work {
    const o = options ? parse(commonSchema, options, this.#where(call)) : {};
    const dtype = dtypeOf(buf, o.dtype, this.#where(call));
    if (!Number.isInteger(peer) || peer < 0 || peer >= this.size || peer === this.rank) {
      throw new NcclNodeError(
        'ERR_INVALID_ARGUMENT',
        `${this.#where(call)}: peer must be another rank in 0..${this.size - 1}, received ${peer}`,
      );
    }
    return this.#submit(call, { send: buf, recv: buf, count: lengthOf(buf, dtype), dtype, root: peer, timeoutMs: o.timeoutMs });
  }

  #checkOpen(call: OpName): void {
    if (this.#closed === 'destroyed') {
      throw new NcclNodeError('ERR_COMM_DESTROYED', `${this.#where(call)}: the communicator was destroyed`);
    }
    if (this.#closed === 'aborted') {
      const why = this.#abortReason ? ` (${this.#abortReason.message})` : '';
      throw new NcclNodeError('ERR_COMM_ABORTED', `${this.#where(call)}: the communicator was aborted${why}`);
    }
  }

  #start(call: OpName, s: Submission): Promise<NativeComm | null | undefined> | undefined {
    this.#checkOpen(call);
    const done = this.#native.submit(
      OpKind[call],
      DTYPE_CODE[s.dtype],
      REDUCE_OP_CODE[s.op ?? 'sum'],
      toNative(s.send),
      toNative(s.recv),
      s.count,
      s.root ?? -1,
      s.timeoutMs ?? this.timeoutMs,
      s.color,
      s.key,
      s.sendCounts,
      s.recvCounts,
      s.preMulScalar,
    );
    return done;
  }

  #submit(call: OpName, s: Submission): Work {
    // Captured before the work leaves the JS thread, so failures point at the
    // caller; opt-in, since a stack capture costs more than the rest of the call.
    const callSite = this.#callerStacks ? new Error(call) : undefined;
    // The entry time from before the call (a call that completes on this thread has run
    // by the time it returns): the native side's stamp, or the clock read here.
    const stamps = this.#stamps;
    const before = stamps === undefined ? collectiveStarted() : 0;
    const native = this.#start(call, s);
    const submitted = stamps === undefined ? before : stamps[0]! - MONOTONIC_ORIGIN_MS;
    const ended = native !== undefined ? 0 : stamps === undefined ? performance.now() : stamps[1]! - MONOTONIC_ORIGIN_MS;
    return this.#workOf(call, native, s.count, s.dtype, s.root ?? -1, collectiveBytes(call, s.count, s.dtype, this.size),
      submitted, ended, callSite);
  }

  /**
   * The Work of a call entered at `submitted`: `native` undefined when it completed,
   * successfully, at `ended` before the native call returned (native/core/engine.h,
   * submitCall: nothing to await, so no promise reaction either), else its promise.
   */
  #workOf(call: OpName, native: Promise<unknown> | undefined, count: number, dtype: DType, root: number, bytes: number,
    submitted: number, ended: number, callSite: Error | undefined): Work {
    const record = this.flightRecord;
    const entry = record.begin(call, count, dtype, root, submitted);
    if (native === undefined) {
      record.completed(entry, ended);
      collectiveEnded(this.#clock, call, bytes, submitted, true, ended);
      return Work.completed();
    }
    // The flight record, the metrics, the failure's explanation and the Work in one
    // callback on the native promise: each callback is a promise reaction and a
    // microtask per call.
    const explain = this.#explain;
    const work = new Work(undefined, call, this, callSite);
    native.then(
      () => {
        const at = performance.now();
        record.completed(entry, at);
        collectiveEnded(this.#clock, call, bytes, submitted, true, at);
        work._resolve();
      },
      (err: unknown) => {
        const at = performance.now();
        record.failed(entry, err, at);
        collectiveEnded(this.#clock, call, bytes, submitted, false, at);
        if (explain === undefined) work._reject(err);
        else explain(err).then((why) => work._reject(why), (why: unknown) => work._reject(why));
      },
    );
    return this.#track(work);
  }

  #track<T>(work: Work<T>): Work<T> {
    this.#pending.add(work as Work<unknown>);
    return work;
  }

  /** @internal A Work of this communicator settled. */
  _settled(work: Work<unknown>): void {
    this.#pending.delete(work);
  }
}

/** UTF-8 JSON of `value`, or why JSON cannot encode it. */
function encodeObject(value: unknown): Uint8Array | string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (err) {
    return `the value cannot be encoded as JSON (${err instanceof Error ? err.message : String(err)})`;
  }
  if (text === undefined) return `the value cannot be encoded as JSON (received ${typeof value})`;
  return new TextEncoder().encode(text);
}

function checkEncoded(encoded: Uint8Array | string, rank: number, where: string): Uint8Array {
  if (typeof encoded !== 'string') return encoded;
  throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${where}: ${encoded}`, { rank });
}

function decodeObject(bytes: Uint8Array, where: string): unknown {
  try {
    return JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes));
  } catch (err) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${where}: a rank's bytes are not UTF-8 JSON (${err instanceof Error ? err.message : String(err)})`);
  }
}
