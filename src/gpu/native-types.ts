/** The GPU half of the addon's native surface (native/cuda/gpu_addon.cpp and friends). */
import type { NativeComm } from '../native.js';

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
  register(buf: NativeDeviceBuffer): bigint;
  deregister(handle: bigint): void;
  registerHost(buffer: ArrayBuffer): bigint;
  windowRegister(buf: NativeDeviceBuffer, flags: number): bigint;
  windowDeregister(handle: bigint): void;
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
}

export interface GpuInfo {
  cuda: boolean;
  cudaError?: string;
  devices: number;
  driverVersion: number;
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
  pinHost(buffer: ArrayBuffer, device: number): void;
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
