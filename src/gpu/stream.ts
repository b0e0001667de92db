/** CUDA streams and events. Waiting is a promise settled by a native poller thread. */
import { binding } from '../native.js';
import { currentDevice } from './current-device.js';
import type { NativeEvent, NativeStream } from '../native/contract.js';

export class Stream {
  readonly native: NativeStream;
  constructor(options: { device?: number } = {}) {
    this.native = new (binding().NativeStream)(options.device ?? currentDevice());
  }
  get device(): number {
    return this.native.device;
  }
  /** Resolves when all work queued so far has finished. */
  async synchronize(): Promise<void> {
    await this.native.synchronize();
  }
  /** True when the stream is idle. */
  query(): boolean {
    return this.native.query();
  }
  /** Later work on this stream waits for `event`. */
  waitEvent(event: Event): void {
    this.native.waitEvent(event.native);
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
    this.native = new (binding().NativeEvent)(options.device ?? currentDevice(), options.timing ?? false);
  }
  record(stream?: Stream): void {
    this.native.record(stream?.native);
  }
  query(): boolean {
    return this.native.query();
  }
  async synchronize(): Promise<void> {
    await this.native.synchronize();
  }
  /** Milliseconds from this event to `end` (both recorded with timing: true). */
  elapsedMs(end: Event): number {
    return this.native.elapsedMs(end.native);
  }
  destroy(): void {
    this.native.destroy();
  }
  [Symbol.dispose](): void {
    this.destroy();
  }
}
