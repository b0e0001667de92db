/** The checkpoint I/O surface of the addon (native/io/io_addon.cpp). */
import type { NativeDeviceBuffer } from '../gpu/native-types.js';

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
  readonly crc32cHardware: boolean;
}
