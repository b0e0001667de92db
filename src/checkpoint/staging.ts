/**
 * Where a Checkpointer's snapshots live between save() and the commit, reused
 * from one save to the next so a warm snapshot is a copy, not an allocation:
 * host memory from a budgeted pool (host-pool.ts) for host tensors, pinned host
 * buffers for DeviceBuffers on the posix path, device buffers for DeviceBuffers
 * on the GPUDirect Storage path, and one side stream per device for the device copies.
 */
import { mkdirSync } from 'node:fs';
import { totalmem } from 'node:os';
import { DeviceBuffer, PinnedHostBuffer } from '../gpu/device-buffer.js';
import { Stream } from '../gpu/stream.js';
import { HostPool, type HostPoolStats } from './host-pool.js';
import { io } from './io.js';
import type { SnapshotOptions, Staged } from './state.js';

export interface StagingOptions {
  /**
   * Most bytes of host memory kept for snapshots of host tensors between saves
   * (default: a quarter of the machine's memory, at most 8 GiB). 0 turns the pool off:
   * every save then copies into memory allocated for it.
   */
  budgetBytes?: number;
}

/** The default host staging budget: a quarter of the machine's memory, at most 8 GiB. */
export const defaultStagingBudget = (): number => Math.min(8 * 2 ** 30, Math.floor(totalmem() / 4));

export interface DeviceStagingOptions {
  /** Side stream for the device copies (default: one the checkpointer creates per device). */
  stream?: Stream;
  /** Pinned host allocator for the posix path (default: PinnedHostBuffer). */
  pinned?: (n: number) => PinnedHostBuffer;
  /**
   * 'auto' (default): GPUDirect Storage when libcufile loads and takes an O_DIRECT file in
   * the checkpoint root (snapshot device -> device, cuFile writes it); else 'off': device ->
   * pinned host, then the posix writer.
   */
  gds?: 'auto' | 'off';
}

/** How DeviceBuffer pieces of a save are staged: 'device' (GDS), 'host' (pinned), or 'none' (no DeviceBuffers). */
export type DeviceStaging = 'device' | 'host' | 'none';

export class StagingPool {
  readonly #o: DeviceStagingOptions;
  readonly #root: string;
  /** Host tensors' snapshots. */
  readonly #hostPool: HostPool;
  /** DeviceBuffers' pinned snapshots (posix path), one spare per tensor name. */
  #host = new Map<string, Uint8Array[]>();
  #dev = new Map<string, DeviceBuffer[]>();
  /** Keeps each pinned buffer's owner alive (and disposable) as long as its bytes are pooled. */
  #pins = new Map<ArrayBuffer, PinnedHostBuffer>();
  #streams = new Map<number, Stream>();
  #gds: { available: boolean; reason: string } | undefined;

  constructor(root: string, o: DeviceStagingOptions = {}, staging: StagingOptions = {}) {
    this.#root = root;
    this.#o = o;
    this.#hostPool = new HostPool(staging.budgetBytes ?? defaultStagingBudget());
  }

  /** Allocates and touches host staging for `bytes` ahead of the saves (see HostPool.reserve). */
  reserve(bytes: number, largest: number): Promise<void> {
    return this.#hostPool.reserve(bytes, largest);
  }

  hostStats(): HostPoolStats {
    return this.#hostPool.stats();
  }

  /** GDS usable for this root? Probed once (loads libcufile, registers an O_DIRECT probe file). */
  gds(): { available: boolean; reason: string } {
    if (this.#o.gds === 'off') return { available: false, reason: "disabled (device.gds: 'off')" };
    if (!this.#gds) {
      mkdirSync(this.#root, { recursive: true });
      const s = io().ioGdsStatus(this.#root);
      this.#gds = { available: s.available, reason: s.reason };
    }
    return this.#gds;
  }

  /** Snapshot options for one save holding DeviceBuffers (`hasDevice`) or not. */
  options(hasDevice: boolean, streamDevice: number): { snapshot: SnapshotOptions; staging: DeviceStaging } {
    const alloc = (name: string, n: number, device: boolean): Uint8Array => this.#takeHost(name, n, device);
    const release = (staged: Staged[]) => this.give(staged);
    if (!hasDevice) return { snapshot: { alloc, release }, staging: 'none' };
    const stream = this.#o.stream ?? this.#streamFor(streamDevice);
    if (!this.gds().available) return { snapshot: { alloc, release, stream }, staging: 'host' };
    return { snapshot: { alloc, release, stream, deviceAlloc: (name, n, like) => this.#takeDevice(name, n, like) }, staging: 'device' };
  }

  /** Returns a committed (or failed) save's buffers to the pool. */
  give(staged: Staged[]): void {
    for (const s of staged) {
      if (s.bytes instanceof DeviceBuffer) {
        if (!push(this.#dev, s.name, s.bytes)) s.bytes.dispose();
      } else if (!s.fromDevice) {
        this.#hostPool.give(s.bytes);
      } else if (s.bytes.byteOffset === 0 && s.bytes.byteLength > 0 && !push(this.#host, s.name, s.bytes)) {
        this.#pins.get(s.bytes.buffer as ArrayBuffer)?.dispose();
        this.#pins.delete(s.bytes.buffer as ArrayBuffer);
      }
    }
  }

  dispose(): void {
    for (const list of this.#dev.values()) for (const b of list) b.dispose();
    for (const p of this.#pins.values()) p.dispose();
    for (const s of this.#streams.values()) if (s !== this.#o.stream) s.destroy();
    this.#dev.clear();
    this.#pins.clear();
    this.#host.clear();
    this.#hostPool.dispose();
    this.#streams.clear();
  }

  #takeHost(name: string, n: number, device: boolean): Uint8Array {
    if (!device) return this.#hostPool.take(n);
    const hit = take(this.#host, name, (b) => b.byteLength === n);
    if (hit) return hit;
    const pinned = this.#o.pinned ? this.#o.pinned(n) : new PinnedHostBuffer(n);
    this.#pins.set(pinned.buffer, pinned);
    return new Uint8Array(pinned.buffer, 0, n);
  }

  #takeDevice(name: string, n: number, like: DeviceBuffer): DeviceBuffer {
    return take(this.#dev, name, (b) => b.byteLength === n && b.device === like.device && !b.disposed)
      ?? DeviceBuffer.alloc({ dtype: 'uint8', length: n, device: like.device });
  }

  #streamFor(device: number): Stream {
    let s = this.#streams.get(device);
    if (!s) this.#streams.set(device, (s = new Stream({ device })));
    return s;
  }
}

function take<T>(pool: Map<string, T[]>, name: string, fits: (t: T) => boolean): T | undefined {
  const list = pool.get(name);
  const i = list?.findIndex(fits) ?? -1;
  return list && i >= 0 ? list.splice(i, 1)[0] : undefined;
}

/** Pools `t` unless the tensor already has a spare (false: the caller frees it). */
function push<T>(pool: Map<string, T[]>, name: string, t: T): boolean {
  const list = pool.get(name) ?? [];
  pool.set(name, list);
  if (list.length >= 1) return false;
  list.push(t);
  return true;
}
