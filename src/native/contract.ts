/**
 * The addon's native surface as TypeScript sees it: every binding, the opaque
 * handles it returns, the numeric op kinds and group flags shared with native/, and the
 * symbol through which wrappers hand their native object to collectives. A leaf:
 * it imports nothing but types from errors.ts, so any module may import it and no
 * import cycle can run through it. src/native.ts loads the addon against it.
 *
 * The numeric lists here and in errors.ts mirror native/core/op.h, native/core/errors.h
 * and native/nccl/nccl_control.h; test/contract/lists.test.ts fails when they drift.
 */
import type { ErrorCode } from '../errors.js';

/** Matches native/core/op.h OpKind. */
export const OpKind = {
  allReduce: 0,
  broadcast: 1,
  reduce: 2,
  allGather: 3,
  reduceScatter: 4,
  allToAll: 5,
  gather: 6,
  scatter: 7,
  send: 8,
  recv: 9,
  barrier: 10,
  split: 11,
} as const;
export type OpName = keyof typeof OpKind;

/** Host memory a collective reads or writes; device buffers join this union. */
export type NativeBuffer = ArrayBufferView | ArrayBuffer;

/** The arguments every collective call into NativeComm starts with (submit, submitSync, prepareSync). */
export type CallArgs = [
  kind: number,
  dtype: number,
  redop: number,
  send: NativeBuffer | undefined,
  recv: NativeBuffer | undefined,
  count: number,
  rootOrPeer: number,
  timeoutMs: number,
];

/** A blocking call prepared by NativeComm.prepareSync (native/core/prepared_call.h). */
export interface NativePreparedCall {
  /**
   * The call, blocking, in the communicator's sequence: undefined or its failure
   * thrown. A refusal (freed, memory detached since) tells the other ranks.
   */
  run(): void;
  /**
   * The same call, not blocking (MPI_Start): undefined when it completed, successfully,
   * before returning, else a promise of its outcome (failed here, or queued). Refused
   * (thrown) as run() is.
   */
  start(): Promise<void> | undefined;
  /** Lets the memory go; run() and start() are refused after it. */
  free(): void;
}

export interface NativeComm {
  readonly rank: number;
  readonly size: number;
  readonly backend: string;
  readonly version: string;
  readonly inFlight: number;
  readonly state: 'ok' | 'aborted' | 'broken' | 'destroyed';
  /**
   * Whether shrink() can work now: an NCCL communicator on a library with
   * ncclCommShrink (NCCL >= 2.27) that was not aborted. Gloo: false (re-form instead).
   */
  readonly supportsShrink?: boolean;
  /**
   * ncclCommShrink: a communicator of the other ranks, survivors in order; collective
   * over the survivors only. abort: terminate this communicator's work first
   * (NCCL_SHRINK_ABORT), for one a fault left broken.
   */
  shrink?(excludeRanks: readonly number[], abort: boolean, timeoutMs: number): Promise<NativeComm>;
  /**
   * A call: its promise, or undefined when it completed, successfully, before submit()
   * returned (on the calling thread; native/core/engine.h, submitCall). A split always
   * returns a promise.
   */
  submit(
    ...args: [
      ...CallArgs,
      color?: number,
      key?: number,
      /** allToAll with per-peer element counts (one per rank); count is then ignored. */
      sendCounts?: readonly number[],
      recvCounts?: readonly number[],
      /** NCCL: the sum is of preMulScalar * each rank's input (allReduce, reduceScatter). */
      preMulScalar?: number,
      /** NCCL group boundaries: 0 none, 1 member of the open group, 2 ends it. */
      group?: number,
    ]
  ): Promise<NativeComm | null | undefined> | undefined;
  /**
   * submit()'s collective run to completion on the calling thread (blocking), after
   * the calls queued before it; throws its failure. Host memory, a backend whose
   * operations complete where launched (Gloo); a refusal queues the stand-in
   * reject() would. Absent: no blocking calls.
   */
  submitSync?(...args: CallArgs): void;
  /**
   * submitSync()'s call checked and built once (the views hold their memory; a
   * resizable ArrayBuffer is refused), made by each run() of the returned handle.
   * Preparing is local: it takes no place in the sequence. Absent with submitSync.
   */
  prepareSync?(
    ...args: [
      ...CallArgs,
      /** Each run() writes its entry and exit times here: CLOCK_MONOTONIC, milliseconds. */
      stamps: Float64Array,
    ]
  ): NativePreparedCall;
  /**
   * This rank refused a call locally (bad arguments): queues a stand-in that tells
   * the other ranks, so they fail the same operation and later calls line up.
   */
  reject?(kind: number, code: string, message: string, rootOrPeer: number, timeoutMs: number): void;
  /**
   * Holds `stamps` (a Float64Array of 2): each submit() and submitSync() from then on
   * writes its entry time into [0] and, for a call completed before it returned (submit
   * returned undefined; submitSync, returned or thrown), its exit time into [1], on the
   * monotonic clock in ms (src/comm/monotonic.ts). Absent: the caller reads the clock.
   */
  stampInto?(stamps: Float64Array): void;
  abort(): void;
  destroy(): Promise<void>;
}

export interface GlooOptions {
  rank: number;
  size: number;
  storeHost: string;
  storePort: number;
  token: string;
  prefix: string;
  hostname?: string;
  iface?: string;
  timeoutMs: number;
  checkAgreement: boolean;
  /** Canonical algorithm table (src/comm/gloo/tuning.ts); '' or absent: the built-in one. */
  tuning?: string;
}

/** Matches native/core/op.h Op::Group: an NCCL op's place in a group() (carried by the op itself). */
export const GroupFlag = { none: 0, member: 1, end: 2 } as const;
export type GroupName = keyof typeof GroupFlag;

/**
 * The property through which an object with native memory (a DeviceBuffer) hands
 * its native handle to collectives, kernels and checkpoint I/O. Symbol.for, so that
 * two copies of the package in one process still recognise each other's buffers.
 */
export const nativeHandle = Symbol.for('nccl-node.nativeHandle');

/** An object that carries a native handle under `nativeHandle`. */
export interface HasNativeHandle<H = NativeDeviceBuffer> {
  readonly [nativeHandle]: H;
}

declare const brand: unique symbol;
/** An opaque value from the addon, only good for handing back to the call that takes it. */
export type Opaque<T, Name extends string> = T & { readonly [brand]: Name };
/** An ncclCommRegister registration (device or pinned host memory). */
export type RegistrationHandle = Opaque<bigint, 'RegistrationHandle'>;
/** An ncclCommWindowRegister window. */
export type WindowHandle = Opaque<bigint, 'WindowHandle'>;

// ---- GPU (native/cuda, native/nccl, native/nvml, native/kernels)
export interface NativeDeviceBuffer {
  readonly ptr: bigint;
  readonly byteLength: number;
  readonly device: number;
  readonly disposed: boolean;
  readonly allocator: 'cuMemAlloc' | 'ncclMemAlloc';
  dispose(): void;
  copyFromHost(src: ArrayBufferView | ArrayBuffer, dstOffset: number, stream?: NativeStream): Promise<void>;
  copyToHost<T extends ArrayBufferView | ArrayBuffer>(dst: T, srcOffset: number, stream?: NativeStream): Promise<T>;
  copyFromDevice(src: NativeDeviceBuffer, byteLength: number, dstOffset: number, srcOffset: number, stream?: NativeStream): Promise<void>;
  memset(byte: number, stream?: NativeStream): Promise<void>;
  exportDmabuf(offset: number, byteLength: number): number;
}

export interface NativeStream {
  readonly device: number;
  synchronize(): Promise<void>;
  query(): boolean;
  waitEvent(event: NativeEvent): void;
  destroy(): void;
}

export interface NativeEvent {
  record(stream?: NativeStream): void;
  query(): boolean;
  synchronize(): Promise<void>;
  elapsedMs(end: NativeEvent): number;
  destroy(): void;
}

export interface NativeNcclControl {
  takeChild(): NativeNcclControl | null;
  register(buf: NativeDeviceBuffer): RegistrationHandle;
  deregister(handle: RegistrationHandle): void;
  registerHost(buffer: ArrayBuffer): RegistrationHandle;
  windowRegister(buf: NativeDeviceBuffer, flags: number): WindowHandle;
  windowDeregister(handle: WindowHandle): void;
  flightRecord(): string;
}

export interface NcclOptions {
  rank: number;
  size: number;
  device: number;
  storeHost: string;
  storePort: number;
  token: string;
  prefix: string;
  timeoutMs: number;
  /**
   * On a fault, fail the operations but leave the NCCL communicator for shrink({ abort: true })
   * instead of aborting it (with ncclCommShrink in the library; default false).
   */
  keepOnFault?: boolean;
}

export interface GpuInfo {
  cuda: boolean;
  cudaError?: string;
  devices: number;
  driverVersion: number;
  /** Each device in CUDA's order: its name and PCI address as sysfs spells it ("0000:3b:00.0"). */
  gpus: Array<{ name: string; pciBusId: string }>;
  nccl: boolean;
  ncclVersion?: string;
  ncclVersionCode?: number;
  /** Optional features the loaded libnccl enables (register, symmetricWindows, memAlloc, alltoall, ...). */
  ncclFeatures?: Record<string, boolean>;
  ncclError?: string;
}

export interface GpuBinding {
  NativeDeviceBuffer: new (byteLength: number, device: number, ncclMemAlloc: boolean) => NativeDeviceBuffer;
  NativeStream: new (device: number) => NativeStream;
  NativeEvent: new (device: number, timing: boolean) => NativeEvent;
  createNccl(options: NcclOptions): Promise<NativeComm & { gpuControl: NativeNcclControl }>;
  gpuInfo(): GpuInfo;
  /** A new ArrayBuffer page-locked with cuMemHostRegister; the registration holds its memory until unpinHost or its collection. */
  allocPinned(byteLength: number, device: number): ArrayBuffer;
  unpinHost(buffer: ArrayBuffer, device: number): void;
  dumpFlightRecords(reason?: string): string;
  kernels: {
    fill(buf: NativeDeviceBuffer, count: number, dtype: number, rank: number, seed: number, stream?: NativeStream): Promise<void>;
    verify(buf: NativeDeviceBuffer, count: number, dtype: number, nranks: number, seed: number, stream?: NativeStream): Promise<number>;
    cast(src: NativeDeviceBuffer, dst: NativeDeviceBuffer, kind: number, count: number, stream?: NativeStream): Promise<void>;
    checksum(buf: NativeDeviceBuffer, byteLength: number, stream?: NativeStream): Promise<bigint>;
    add(dst: NativeDeviceBuffer, src: NativeDeviceBuffer, count: number, stream?: NativeStream): Promise<void>;
    scale(buf: NativeDeviceBuffer, count: number, c: number, stream?: NativeStream): Promise<void>;
    sumSquares(buf: NativeDeviceBuffer, count: number, stream?: NativeStream): Promise<number>;
    adamw(param: NativeDeviceBuffer, grad: NativeDeviceBuffer, expAvg: NativeDeviceBuffer, expAvgSq: NativeDeviceBuffer,
      count: number, hyper: number[], stream?: NativeStream): Promise<void>;
    sgd(param: NativeDeviceBuffer, grad: NativeDeviceBuffer, momentumBuffer: NativeDeviceBuffer | null, count: number,
      hyper: number[], stream?: NativeStream): Promise<void>;
    path(): string;
  };
  health(): Promise<unknown>;
  onXid(callback: (event: Record<string, unknown>) => void): { devices: number; stop(): void };
}

// ---- checkpoint I/O (native/io)
/** Host memory, or a DeviceBuffer's native handle (read or written on the device). */
export type IoMemory = ArrayBufferView | NativeDeviceBuffer;

export interface IoWriteOptions {
  /** Try O_DIRECT (default true); the writer falls back to buffered I/O where refused. */
  direct?: boolean;
  /** Bytes per pwrite (default 8 MiB). */
  blockBytes?: number;
  /** Granularity of the per-chunk CRCs that partial reads verify (default 1 MiB). */
  chunkBytes?: number;
  /** fsync before resolving (default true). */
  sync?: boolean;
  /** Drop the file from the page cache afterwards (default true). */
  dropCache?: boolean;
  /** Device segments: write them with GPUDirect Storage (cuFile) where usable (default true). */
  gds?: boolean;
}

export interface IoWriteResult {
  bytes: number;
  /** Every block went through O_DIRECT. */
  direct: boolean;
  /** The device segments went to the file through cuFileWrite. */
  gds: boolean;
  /** Why not, when there were device segments ('' otherwise). */
  gdsReason: string;
  seconds: number;
  /** CRC32C of each checksummed segment, in order. */
  crcs: number[];
  /** Per-chunk CRC32C of each checksummed segment. */
  chunks: Uint32Array[];
}

export interface IoBinding {
  ioWriteFile(path: string, segments: IoMemory[], checksum: boolean[], options?: IoWriteOptions): Promise<IoWriteResult>;
  /**
   * Reads [offsets[i], offsets[i]+lengths[i]) into the start of dsts[i]; CRC32C of each range.
   * Device destinations: cuFileRead where usable (gds: true), else through a host bounce buffer.
   */
  ioReadFile(path: string, offsets: number[], lengths: number[], dsts: IoMemory[], options?: { gds?: boolean }):
    Promise<{ crcs: Uint32Array; seconds: number; gds: boolean; gdsReason: string }>;
  /** Whether libcufile loads (NCCL_NODE_LIBCUFILE or libcufile.so.0) and, given `dir`, takes an O_DIRECT file there. */
  ioGdsStatus(dir?: string): { available: boolean; library: string | null; reason: string };
  ioFsyncDir(path: string): Promise<void>;
  /** Copies each source into its destination on native threads, spread over the cores. */
  ioCopy(dsts: ArrayBufferView[], srcs: ArrayBufferView[]): Promise<{ seconds: number }>;
  crc32c(data: ArrayBufferView, seed?: number): number;
  /**
   * Host copies of this process taken from the end (destination 1-31 bytes past the source
   * in its page); this CPU's stall there, measured once per process (a 64 KiB copy 16
   * bytes into a page against half a page in: 1 where not measured); and whether copies in
   * that band go backward (NCCL_NODE_COPY_BACKWARD, else a ratio of 2 or more).
   */
  hostCopyStats(): { backwardBytes: number; aliasingRatio: number; copiesBackward: boolean };
  readonly crc32cHardware: boolean;
}

export interface GlooAlgoStats {
  /** All-reduces whose data rode the agreement round whole. */
  meshAllReduces: number;
  /** All-reduces in two rounds: blocks to their owners in the agreement round, reduced blocks back in a second. */
  meshTwoRoundAllReduces: number;
  meshAllGathers: number;
  meshReduceScatters: number;
  legacyAllReduces: number;
  legacyAllGathers: number;
  legacyReduceScatters: number;
  /** All-reduces, all-gathers and reduce-scatters on the backend's own TCP ring. */
  tcpRingCalls: number;
  /** All-gathers through Gloo's gloo::allgather (one rank alone, large gathers, or a tuning file's `gloo`). */
  glooAllGathers: number;
  /** All-to-alls of equal blocks carried whole in the agreement round over TCP. */
  meshAllToAlls: number;
  /** All-to-alls of equal blocks carried whole in the shared-memory segment's round (one host). */
  shmAllToAlls: number;
  /** All-to-alls (equal blocks or per-peer counts) on the backend's own TCP connections. */
  tcpAllToAlls: number;
  /** Broadcasts, reduces, gathers and scatters carried whole in the agreement round over TCP. */
  meshRooted: number;
  /** Broadcasts, reduces, gathers and scatters through the shared-memory segment (its round, or rounds of their own). */
  shmRooted: number;
  /** Broadcasts, reduces, gathers and scatters on the backend's own TCP connections. */
  tcpRooted: number;
  /** Of those, broadcasts sent along the binomial tree instead of the chain (NCCL_NODE_TCP_BROADCAST, docs/gloo.md). */
  tcpBroadcastTrees: number;
  /** Calls whose TCP agreement round completed them on the calling thread (its peers waited for briefly). */
  tcpOnCaller: number;
  /** Two-round all-reduces whose second round the calling thread started and, its peers not yet in, left to the worker. */
  tcpSecondRoundsToWorker: number;
  /** Peers' messages the TCP agreement round read straight into a call's output instead of its own buffers. */
  meshLandedBodies: number;
  /** TCP receives of 64 KiB or more put to sleep until a mark of their bytes is in (NCCL_NODE_TCP_RCVLOWAT). */
  tcpMarkedReceives: number;
  /** Peers connected over TCP one connection each way (NCCL_NODE_TCP_CONNECTIONS_PER_PAIR), summed over this process's communicators. */
  tcpOneWayPeers: number;
  /** TCP connections within the host given a fixed receive buffer (NCCL_NODE_TCP_RCVBUF), summed over this process's communicators. */
  tcpSizedReceiveBuffers: number;
  /** Bytes received over TCP from this host through a buffer half a page off, where the destination's page offset slows the kernel's copy (NCCL_NODE_TCP_BOUNCE). */
  tcpBouncedBytes: number;
  /** Reads over the backend's own TCP connections that found nothing to read, summed over this process's communicators. */
  tcpEmptyReads: number;
  /** Reads over the backend's own TCP connections that moved bytes from a socket, summed over this process's communicators. */
  tcpDataReads: number;
  /** Bytes a read over the own TCP connections took beyond the message it was reading, kept for the next read from that peer. */
  tcpUnreadBytes: number;
}

export interface GlooShmStats {
  /** Segments mapped, and collectives that went through them. */
  segments: number;
  allReduces: number;
  /** All-reduces across hosts: intra-host through the segment, leaders over TCP. */
  twoLevel: number;
  allGathers: number;
  reduceScatters: number;
  /** All-to-alls in rounds of pieces (small ones ride in the agreement round and count only in glooAlgoStats). */
  allToAlls: number;
  bytes: number;
  /** Communicators that fell back to TCP (segment creation failed on some rank). */
  fallbacks: number;
  /** Small calls (all-reduces, barriers) completed on the calling thread, their peers polled for briefly. */
  onCaller: number;
  /** Waits that slept in a futex on a peer's counter (after a spin and yields), those of them a peer's store woke, and this process's stores that woke a sleeper. */
  naps: number;
  napsWoken: number;
  wakes: number;
  /** Name of the last segment mapped ('' before any). */
  lastSegment: string;
}

/** GpuBinding: DeviceBuffer, Stream, Event, createNccl, health; IoBinding: checkpoint I/O. */
export interface Binding extends GpuBinding, IoBinding {
  createGloo(options: GlooOptions): Promise<NativeComm>;
  /** This process's use of the Gloo backend's shared-memory path (docs/gloo.md), counted since the addon loaded. */
  glooShmStats(): GlooShmStats;
  /** Calls of this process that took the mesh round or a legacy Gloo class (native/gloo/gloo_tuning.h). */
  glooAlgoStats(): GlooAlgoStats;
  /** float -> float16 (false) or bfloat16 (true) bits, with the native rounding. */
  floatTo16(value: number, bf16: boolean): number;
  /**
   * The benchmark's verifiable data on host memory, on native threads: rank's input
   * (rank >= 0) or the expected result (rank -1) for elements offset.. of `buf`.
   * dtype: a native code below 10 (int8 .. bfloat16); op: RedOp code, or 5 for a copy.
   */
  verifiablePrepareHost(buf: ArrayBufferView, dtype: number, op: number, nranks: number, rank: number, seed: number, offset: number): void;
  /** Elements of `actual` whose bits differ from `expected`'s (2 ULP allowed for floating-point avg). */
  verifiableCompareHost(actual: ArrayBufferView, expected: ArrayBufferView, dtype: number, op: number): number;
  napiVersion: number;
  /**
   * Heartbeats from a native thread while a blocking call holds the JS thread
   * (native/core/held_beats.h): `key` gets {pid, seq, held: true} every intervalMs.
   * Starting again retargets; stop waits (at most 2 s) for a beat on its way.
   */
  heldBeatsStart(options: { host: string; port: number; token: string; key: string; pid: number; intervalMs: number }): void;
  heldBeatsStop(): void;
  /** Beats the native thread has written in this process. */
  heldBeatsWritten(): number;
  /**
   * Gives the addon the class it throws and rejects with: native code then builds
   * every error as `new ctor(code, message)`. src/native.ts calls it once per load.
   */
  setErrorConstructor(ctor: new (code: ErrorCode, message: string) => Error): void;
}
