/**
 * GPU memory from TypeScript. A DeviceBuffer is one device allocation with a dtype;
 * collectives on the NCCL backend take it where the Gloo backend takes TypedArrays.
 *
 *   using buf = await DeviceBuffer.from(new Float32Array([1, 2, 3]));
 *   await comm.allReduce(buf);
 *   const sums = await buf.toHost();   // a new Float32Array
 */
import { DTYPE_BYTES, DTYPE_CODE, arrayTypeOf, dtypeOf, type DType, type HostArray } from '../dtypes.js';
import { NcclNodeError } from '../errors.js';
import { binding, nativeHandle, type NativeDeviceBuffer } from '../native.js';
import { currentDevice } from './current-device.js';
import type { Stream } from './stream.js';

export interface AllocOptions {
  dtype: DType;
  length: number;
  /** CUDA device ordinal; default LOCAL_RANK (or 0). */
  device?: number;
  /** Allocate with ncclMemAlloc (NCCL >= 2.19), as NVLS / symmetric kernels want. */
  ncclMemAlloc?: boolean;
}


export class DeviceBuffer {
  readonly dtype: DType;
  readonly length: number;
  readonly #native: NativeDeviceBuffer;

  private constructor(native: NativeDeviceBuffer, dtype: DType, length: number) {
    this.#native = native;
    this.dtype = dtype;
    this.length = length;
  }

  /** Uninitialised device memory for `length` elements of `dtype`. */
  static alloc(options: AllocOptions): DeviceBuffer {
    const { dtype, length } = options;
    if (!(dtype in DTYPE_BYTES)) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `DeviceBuffer.alloc: unknown dtype ${String(dtype)}`);
    if (!Number.isSafeInteger(length) || length < 1) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `DeviceBuffer.alloc: length must be a positive integer, received ${length}`);
    }
    const device = options.device ?? currentDevice();
    const native = new (binding().NativeDeviceBuffer)(length * DTYPE_BYTES[dtype], device, options.ncclMemAlloc ?? false);
    return new DeviceBuffer(native, dtype, length);
  }

  /**
   * A device copy of a TypedArray. Uint16Array data needs {dtype: 'float16' | 'bfloat16'}.
   * The copy is asynchronous; use `await DeviceBuffer.fromAsync(...)`, or this and
   * rely on stream order (collectives run after the copy on the same device).
   */
  static async from(array: HostArray, options: { dtype?: DType; device?: number; stream?: Stream } = {}): Promise<DeviceBuffer> {
    const dtype = dtypeOf(array, options.dtype, 'DeviceBuffer.from');
    const buf = DeviceBuffer.alloc({ dtype, length: array.length, ...(options.device !== undefined ? { device: options.device } : {}) });
    await buf.copyFrom(array, options.stream);
    return buf;
  }

  get device(): number {
    return this.#native.device;
  }
  get byteLength(): number {
    return this.length * DTYPE_BYTES[this.dtype];
  }
  /** The device address (CUdeviceptr). */
  get ptr(): bigint {
    return this.#native.ptr;
  }
  get disposed(): boolean {
    return this.#native.disposed;
  }
  get allocator(): 'cuMemAlloc' | 'ncclMemAlloc' {
    return this.#native.allocator;
  }
  /**
   * `length` elements of `dtype` (default: this buffer's) starting `byteOffset` bytes
   * in, sharing this buffer's memory (no copy; keeps this buffer alive; disposing it
   * invalidates the view). The GPU bench carves its send/recv slabs this way.
   */
  view(byteOffset: number, length: number, dtype: DType = this.dtype): DeviceBuffer {
    const bytes = length * DTYPE_BYTES[dtype];
    if (!Number.isSafeInteger(byteOffset) || !Number.isSafeInteger(length) || byteOffset < 0 || length < 1 || byteOffset + bytes > this.byteLength) {
      throw new NcclNodeError('ERR_SIZE_MISMATCH', `view: ${bytes} bytes at offset ${byteOffset} do not fit in a buffer of ${this.byteLength} bytes`);
    }
    const View = binding().NativeDeviceBuffer as unknown as new (p: NativeDeviceBuffer, o: number, n: number) => NativeDeviceBuffer;
    return new DeviceBuffer(new View(this.#native, byteOffset, bytes), dtype, length);
  }

  /** What collectives hand to native code. */
  get [nativeHandle](): NativeDeviceBuffer {
    return this.#native;
  }

  /** Copies host data in (async, on `stream` or the null stream). */
  copyFrom(src: HostArray, stream?: Stream): Promise<void> {
    if (src.byteLength !== this.byteLength) {
      throw new NcclNodeError('ERR_SIZE_MISMATCH', `copyFrom: source holds ${src.byteLength} bytes, the DeviceBuffer ${this.byteLength}`);
    }
    return this.#native.copyFromHost(src, 0, stream?.native);
  }

  /** Copies the contents into `dst` (a TypedArray of the same byte length) once the GPU is done. */
  async copyTo<T extends HostArray>(dst: T, stream?: Stream): Promise<T> {
    if (dst.byteLength !== this.byteLength) {
      throw new NcclNodeError('ERR_SIZE_MISMATCH', `copyTo: destination holds ${dst.byteLength} bytes, the DeviceBuffer ${this.byteLength}`);
    }
    await this.#native.copyToHost(dst, 0, stream?.native);
    return dst;
  }

  /** A new TypedArray with the contents (Uint16Array for float16 / bfloat16). */
  toHost(stream?: Stream): Promise<HostArray> {
    const Ctor = arrayTypeOf(this.dtype);
    return this.copyTo(new Ctor(this.length) as HostArray, stream);
  }

  /** Device-to-device copy of all of `src` (same byte length). */
  copyFromDevice(src: DeviceBuffer, stream?: Stream): Promise<void> {
    if (src.byteLength !== this.byteLength) {
      throw new NcclNodeError('ERR_SIZE_MISMATCH', `copyFromDevice: source holds ${src.byteLength} bytes, this buffer ${this.byteLength}`);
    }
    return this.#native.copyFromDevice(src.#native, this.byteLength, 0, 0, stream?.native);
  }

  /** Sets every byte to `byte`. */
  fillBytes(byte: number, stream?: Stream): Promise<void> {
    return this.#native.memset(byte & 0xff, stream?.native);
  }

  /**
   * GPUDirect: exports [offset, offset + byteLength) as a dmabuf file descriptor for
   * RDMA NICs and storage (cuMemGetHandleForAddressRange). The range must start at a
   * page-aligned device address (cuMemAlloc promises only 256 bytes: see `ptr`) and span
   * whole pages, or the call fails with ERR_INVALID_ARGUMENT;
   * the caller closes the fd.
   */
  exportDmabuf(offset = 0, byteLength = this.byteLength): number {
    return this.#native.exportDmabuf(offset, byteLength);
  }

  /**
   * Lets go of the device memory now (the GC would later): later calls on this buffer
   * or its views fail with ERR_INVALID_ARGUMENT. Memory that a collective or a
   * checkpoint read or write still in flight was handed (one queued behind others,
   * say) is freed when that call settles, so it runs on what it was given; memory
   * registered with a communicator, at deregister() or when the communicator is
   * destroyed. Copies and kernels already on a stream are waited for by the driver's
   * free itself.
   */
  dispose(): void {
    this.#native.dispose();
  }
  [Symbol.dispose](): void {
    this.dispose();
  }

  /** ncclDataType_t of the buffer. */
  get dtypeCode(): number {
    return DTYPE_CODE[this.dtype];
  }
}

/**
 * Page-locked host memory that JS reads and writes directly: a new ArrayBuffer
 * registered with cuMemHostRegister, so copies to and from the GPU are DMA and truly
 * asynchronous, and NICs can reach it. The registration holds the memory: dispose()
 * unregisters it now (the memory stays readable), and a buffer dropped without it is
 * unregistered when collected, before its memory is freed.
 */
export class PinnedHostBuffer {
  readonly buffer: ArrayBuffer;
  readonly device: number;
  #pinned = true;

  constructor(byteLength: number, options: { device?: number } = {}) {
    this.device = options.device ?? currentDevice();
    this.buffer = binding().allocPinned(byteLength, this.device);
  }

  /** A view of the pinned bytes as `dtype` elements. */
  view(dtype: DType): HostArray {
    const Ctor = arrayTypeOf(dtype);
    return new Ctor(this.buffer) as HostArray;
  }

  get pinned(): boolean {
    return this.#pinned;
  }

  dispose(): void {
    if (!this.#pinned) return;
    this.#pinned = false;
    binding().unpinHost(this.buffer, this.device);
  }
  [Symbol.dispose](): void {
    this.dispose();
  }
}
