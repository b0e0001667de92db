/** CUDA streams and events. Waiting is a promise settled by a native poller thread. */
import { fromNative } from '../errors.js';
import { binding } from '../native.js';
import { currentDevice } from './device.js';
import type { NativeEvent, NativeStream } from './native-types.js';

function call<T>(f: () => T): T {
  try {
    return f();
  } catch (err) {
    throw fromNative(err);
  }
}

export class Stream {
  readonly native: NativeStream;
  constructor(options: { device?: number } = {}) {
    this.native = call(() => new (binding().NativeStream)(options.device ?? currentDevice()));
  }
  get device(): number {
    return this.native.device;
  }
  /** Resolves when all work queued so far has finished. */
  async synchronize(): Promise<void> {
    await call(() => this.native.synchronize()).catch((e: unknown) => { throw fromNative(e); });
  }
  /** True when the stream is idle. */
  query(): boolean {
    return call(() => this.native.query());
  }
  /** Later work on this stream waits for `event`. */
  waitEvent(event: Event): void {
    call(() => this.native.waitEvent(event.native));
  }
  destroy(): void {
    this.native.destroy();
  }
  [Symbol.dispose](): void {
    this.destroy();
  }
}

export class Event {
  readonly native: NativeEvent;
  constructor(options: { device?: number; timing?: boolean } = {}) {
    this.native = call(() => new (binding().NativeEvent)(options.device ?? currentDevice(), options.timing ?? false));
  }
  record(stream?: Stream): void {
    call(() => this.native.record(stream?.native));
  }
  query(): boolean {
    return call(() => this.native.query());
  }
  async synchronize(): Promise<void> {
    await call(() => this.native.synchronize()).catch((e: unknown) => { throw fromNative(e); });
  }
  /** Milliseconds from this event to `end` (both recorded with timing: true). */
  elapsedMs(end: Event): number {
    return call(() => this.native.elapsedMs(end.native));
  }
  destroy(): void {
    this.native.destroy();
  }
  [Symbol.dispose](): void {
    this.destroy();
  }
}
