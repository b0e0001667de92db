/**
 * A handle on one in-flight operation, like torch.distributed's Work: await it
 * directly, or wait(timeoutMs) for a bounded wait, and poll isCompleted().
 */
import { NcclNodeError, fromNative } from '../errors.js';

export class Work<T = void> implements PromiseLike<T> {
  readonly #promise: Promise<T>;
  #done = false;
  #failed = false;
  #rejectEarly: ((err: unknown) => void) | undefined;

  /** @param describe names the operation in errors, e.g. "allReduce #12 on rank 1 of 4". */
  constructor(
    native: Promise<T>,
    private readonly describe: string,
    callSite?: Error,
  ) {
    this.#promise = new Promise<T>((resolve, reject) => {
      this.#rejectEarly = reject;
      native.then(resolve, (err: unknown) => reject(fromNative(err, callSite)));
    }).then(
      (value) => {
        this.#done = true;
        return value;
      },
      (err: unknown) => {
        this.#done = true;
        this.#failed = true;
        throw err;
      },
    );
    // An unobserved failure must not crash the process before the caller awaits.
    this.#promise.catch(() => {});
  }

  /** @internal Fails the work now (abort), whatever the native operation still does. */
  _fail(err: unknown): void {
    this.#rejectEarly?.(err);
  }

  /** A Work that has already failed (argument errors found before submission). */
  static rejected<T = void>(err: unknown, describe: string): Work<T> {
    return new Work<T>(Promise.reject(err), describe);
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
          new NcclNodeError('ERR_TIMEOUT', `${this.describe} did not complete within ${timeoutMs} ms`, {
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
}
