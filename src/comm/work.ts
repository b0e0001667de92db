/**
 * A handle on one in-flight operation, like torch.distributed's Work: await it
 * directly, or wait(timeoutMs) for a bounded wait, and poll isCompleted().
 */
import { NcclNodeError, fromNative } from '../errors.js';

/** Who issued a Work: named in its errors, told when it settles. */
export interface WorkOwner {
  readonly rank: number;
  readonly size: number;
  /** @internal */
  _settled?(work: Work<unknown>): void;
}

const ignore = (): void => {};

// The promise of every Work that completed before its call returned (Work.completed):
// shared, since a settled promise cannot change.
const COMPLETED: Promise<void> = Promise.resolve();
// The constructor's mark for such a Work; not exported, so only Work.completed() makes one.
const ALREADY_DONE: unique symbol = Symbol('completed');

export class Work<T = void> implements PromiseLike<T> {
  readonly #promise: Promise<T>;
  readonly #call: string;
  readonly #owner: WorkOwner | undefined;
  #done = false;
  #failed = false;
  readonly #callSite: Error | undefined;
  #resolve!: (value: T) => void;
  #reject!: (err: unknown) => void;

  /**
   * @param native settles the work; without it the issuer settles it through
   *   _resolve() / _reject() (the communicator's hot path: one promise reaction fewer per call).
   * @param call the operation, e.g. "allReduce"; errors name it with the owner's rank.
   * @param callSite an Error made at the call, whose stack failures then carry.
   */
  constructor(native: Promise<T> | undefined | typeof ALREADY_DONE, call: string, owner?: WorkOwner, callSite?: Error) {
    this.#call = call;
    this.#owner = owner;
    this.#callSite = callSite;
    if (native === ALREADY_DONE) {
      // Nothing to settle: no promise of its own, no resolvers, no failure to observe.
      this.#promise = COMPLETED as Promise<T>;
      this.#done = true;
      return;
    }
    // One promise per Work on the hot path; the flags are set where it settles.
    this.#promise = new Promise<T>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    native?.then(
      (value) => this._resolve(value),
      (err: unknown) => this._reject(err),
    );
    // An unobserved failure must not crash the process before the caller awaits.
    this.#promise.catch(ignore);
  }

  /** @internal The operation completed with `value`. */
  _resolve(value: T): void {
    // A settled promise ignores a second settlement; a completed Work has no resolvers.
    if (this.#done) return;
    this.#settle(false);
    this.#resolve(value);
  }

  /** @internal The operation failed with `err` (a native error, converted here). */
  _reject(err: unknown): void {
    if (this.#done) return;
    this.#settle(true);
    this.#reject(fromNative(err, this.#callSite));
  }

  #settle(failed: boolean): void {
    if (this.#done) return;
    this.#done = true;
    this.#failed = failed;
    this.#owner?._settled?.(this as Work<unknown>);
  }

  /** @internal Fails the work now (abort), whatever the native operation still does. */
  _fail(err: unknown): void {
    if (this.#done) return;
    this.#settle(true);
    this.#reject(err);
  }

  /**
   * A Work whose operation completed, successfully, before the call returned (a small
   * host operation the backend finished on the calling thread): the communicator's hot
   * path, with no promise, closure or resolver made for it.
   */
  static completed(call: string, owner?: WorkOwner): Work<void> {
    return new Work<void>(ALREADY_DONE, call, owner);
  }

  /** A Work that has already failed (argument errors found before submission). */
  static rejected<T = void>(err: unknown, call: string): Work<T> {
    return new Work<T>(Promise.reject(err), call);
  }

  then<R1 = T, R2 = never>(
    onfulfilled?: ((value: T) => R1 | PromiseLike<R1>) | null,
    onrejected?: ((reason: unknown) => R2 | PromiseLike<R2>) | null,
  ): Promise<R1 | R2> {
    return this.#promise.then(onfulfilled, onrejected);
  }

  catch<R = never>(onrejected: (reason: unknown) => R | PromiseLike<R>): Promise<T | R> {
    return this.#promise.catch(onrejected);
  }

  /** True once the operation finished, successfully or not. */
  isCompleted(): boolean {
    return this.#done;
  }

  /** True once the operation failed. */
  isFailed(): boolean {
    return this.#failed;
  }

  /**
   * Resolves when the operation completes. With a timeout, rejects with
   * ERR_TIMEOUT if it has not completed by then; the operation itself keeps its
   * own deadline (the communicator's or the call's timeoutMs).
   */
  wait(timeoutMs?: number): Promise<T> {
    if (timeoutMs === undefined || this.#done) return this.#promise;
    if (!Number.isFinite(timeoutMs) || timeoutMs < 0) {
      return Promise.reject(
        new NcclNodeError('ERR_INVALID_ARGUMENT', `wait: expected a timeout in ms >= 0, received ${timeoutMs}`),
      );
    }
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(
          new NcclNodeError('ERR_TIMEOUT', `${this.#describe()} did not complete within ${timeoutMs} ms`, {
            timeoutMs,
          }),
        );
      }, timeoutMs);
      this.#promise.then(
        (v) => {
          clearTimeout(timer);
          resolve(v);
        },
        (e: unknown) => {
          clearTimeout(timer);
          reject(e);
        },
      );
    });
  }

  #describe(): string {
    return this.#owner ? `${this.#call} on rank ${this.#owner.rank} of ${this.#owner.size}` : this.#call;
  }
}
