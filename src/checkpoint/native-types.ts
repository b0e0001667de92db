/** The checkpoint I/O surface of the addon (native/io/io_addon.cpp). */

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
}

export interface IoWriteResult {
  bytes: number;
  /** Every block went through O_DIRECT. */
  direct: boolean;
  seconds: number;
  /** CRC32C of each checksummed segment, in order. */
  crcs: number[];
  /** Per-chunk CRC32C of each checksummed segment. */
  chunks: Uint32Array[];
}

export interface IoBinding {
  ioWriteFile(path: string, segments: ArrayBufferView[], checksum: boolean[], options?: IoWriteOptions): Promise<IoWriteResult>;
  /** Reads [offsets[i], offsets[i]+lengths[i]) into the start of dsts[i]; CRC32C of each range. */
  ioReadFile(path: string, offsets: number[], lengths: number[], dsts: ArrayBufferView[]): Promise<{ crcs: Uint32Array; seconds: number }>;
  ioFsyncDir(path: string): Promise<void>;
  crc32c(data: ArrayBufferView, seed?: number): number;
  readonly crc32cHardware: boolean;
}
