/**
 * GPUDirect registration from the public API: `comm.register(buf)` runs
 * ncclCommRegister (NCCL >= 2.19), `comm.register(buf, {symmetric: true})` the
 * collective ncclCommWindowRegister (NCCL >= 2.27; every rank must call it, in the
 * same order), `comm.registerHost(pinned)` registers page-locked host memory. An
 * older library answers ERR_UNAVAILABLE "... needs NCCL >= x.y (loaded: ...)"
 * from the native version gate; Gloo answers ERR_UNAVAILABLE.
 */
import { NcclNodeError, fromNative } from '../../errors.js';
import { nativeHandle, type NativeComm, type NativeDeviceBuffer, type NativeNcclControl } from '../../native.js';
import type { DeviceBuffer, PinnedHostBuffer } from '../../gpu/device-buffer.js';

export interface RegisterOptions {
  /** A symmetric window (ncclCommWindowRegister, NCCL >= 2.27): collective across the communicator. */
  symmetric?: boolean;
}

/** One registration; deregister() (or `using`) releases it. Idempotent. */
export class Registration implements Disposable {
  readonly kind: 'buffer' | 'window' | 'host';
  readonly byteLength: number;
  #release: (() => void) | undefined;
  readonly #alive: () => boolean;

  constructor(kind: Registration['kind'], byteLength: number, release: () => void, alive: () => boolean) {
    this.kind = kind;
    this.byteLength = byteLength;
    this.#release = release;
    this.#alive = alive;
  }

  get registered(): boolean { return this.#release !== undefined; }

  deregister(): void {
    const release = this.#release;
    if (!release) return;
    this.#release = undefined;
    // A destroyed or aborted communicator has already dropped its registrations.
    if (!this.#alive()) return;
    release();
  }

  [Symbol.dispose](): void { this.deregister(); }
}

function controlOf(native: NativeComm, where: string): NativeNcclControl {
  const control = (native as { control?: NativeNcclControl }).control;
  if (!control) {
    throw new NcclNodeError('ERR_UNAVAILABLE',
      `${where}: buffer registration needs the nccl backend (this communicator uses ${native.backend})`);
  }
  if (native.state !== 'ok') {
    throw new NcclNodeError(native.state === 'destroyed' ? 'ERR_COMM_DESTROYED' : 'ERR_COMM_ABORTED',
      `${where}: the communicator is ${native.state}`);
  }
  return control;
}

export function registerBuffer(native: NativeComm, where: string, buf: DeviceBuffer, options: RegisterOptions = {}): Registration {
  const control = controlOf(native, where);
  const dev = (buf as unknown as { [nativeHandle]?: NativeDeviceBuffer } | null)?.[nativeHandle];
  if (!dev || typeof dev.ptr !== 'bigint') {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${where}: expected a DeviceBuffer (use registerHost for pinned host memory)`);
  }
  if (dev.disposed) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${where}: the DeviceBuffer was disposed`);
  const alive = () => native.state === 'ok';
  try {
    if (options.symmetric) {
      const win = control.windowRegister(dev, 1 /* NCCL_WIN_COLL_SYMMETRIC */);
      return new Registration('window', dev.byteLength, () => control.windowDeregister(win), alive);
    }
    const h = control.register(dev);
    return new Registration('buffer', dev.byteLength, () => control.deregister(h), alive);
  } catch (err) {
    const e = fromNative(err);
    throw new NcclNodeError(e.code, `${where}: ${e.message}`);
  }
}

export function registerPinned(native: NativeComm, where: string, pinned: PinnedHostBuffer): Registration {
  const control = controlOf(native, where);
  if (!(pinned?.buffer instanceof ArrayBuffer)) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${where}: expected a PinnedHostBuffer`);
  }
  if (!pinned.pinned) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${where}: the PinnedHostBuffer was disposed (unpinned)`);
  try {
    const h = control.registerHost(pinned.buffer);
    return new Registration('host', pinned.buffer.byteLength, () => control.deregister(h), () => native.state === 'ok');
  } catch (err) {
    const e = fromNative(err);
    throw new NcclNodeError(e.code, `${where}: ${e.message}`);
  }
}
