/**
 * A handle on one in-flight operation, like torch.distributed's Work: await it
 * directly, or wait(timeoutMs) for a bounded wait, and poll isCompleted(). A Work is
 * a Promise of the operation's outcome.
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
// The one Work of every call that completed before returning (Work.completed, completedWork()).
let COMPLETED: Work<void> | undefined;

/**
 * A Work is a promise of its operation's outcome, and `await work` takes the path an
 * awaited native promise takes: its `constructor` is Promise (below), so `await` uses it
 * as it is (one microtask) instead of calling its then() as a foreign thenable's (three,
 * and two more promises). With one settled Work for the calls that complete before
 * returning (completed()), a small awaited all-reduce within a host takes 0.68 of the
 * time it took as a thenable (bench/comm/checkout-ab.ts, 1 and 2 ranks). then(), catch(),
 * finally() and Promise's statics called on Work (Work.all, ...) return plain promises.
 */
export class Work<T = void> extends Promise<T> {
  readonly #call!: string;
  readonly #owner: WorkOwner | undefined;
  #done = false;
  #failed = false;
  readonly #callSite: Error | undefined;
  #resolve: ((value: T) => void) | undefined;
  #reject: ((err: unknown) => void) | undefined;

  /**
   * @param native settles the work; without it the issuer settles it through
   *   _resolve() / _reject() (the communicator's hot path: one promise reaction fewer per call).
   * @param call the operation, e.g. "allReduce"; errors name it with the owner's rank.
   * @param callSite an Error made at the call, whose stack failures then carry.
   */
  constructor(native: Promise<T> | undefined, call: string, owner?: WorkOwner, callSite?: Error) {
    if (typeof native === 'function') {
      // Promise's statics (Work.all, Work.resolve, ...) construct with an executor: they
      // get a plain promise, as then() does.
      return new Promise<T>(native as (resolve: (value: T) => void, reject: (err: unknown) => void) => void) as Work<T>;
    }
    let resolve!: (value: T) => void;
    let reject!: (err: unknown) => void;
    super((res, rej) => {
      resolve = res;
      reject = rej;
    });
    this.#resolve = resolve;
    this.#reject = reject;
    this.#call = call;
    this.#owner = owner;
    this.#callSite = callSite;
    native?.then(
      (value) => this._resolve(value),
      (err: unknown) => this._reject(err),
    );
    // An unobserved failure must not crash the process before the caller awaits.
    Promise.prototype.then.call(this, undefined, ignore);
  }

  /** @internal The operation completed with `value`. */
  _resolve(value: T): void {
    // A settled promise ignores a second settlement; a completed Work has no resolvers.
    if (this.#done) return;
    this.#settle(false);
    this.#resolve!(value);
  }

  /** @internal The operation failed with `err` (a native error, converted here). */
  _reject(err: unknown): void {
    if (this.#done) return;
    this.#settle(true);
    this.#reject!(fromNative(err, this.#callSite));
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
    this.#reject!(err);
  }

  /**
   * A Work whose operation completed, successfully, before the call returned (a small
   * host operation the backend finished on the calling thread): the communicator's hot
   * path. One settled Work serves every such call (nothing of it can change, and making
   * a promise per call was half of an 8-byte awaited call's JavaScript), so two calls
   * that both completed at once return the same object.
   */
  static completed(): Work<void> {
    // No call or owner of its own: it never fails or times out, and it holds no communicator.
    return (COMPLETED ??= completedWork());
  }

  /**
   * `instanceof Work` holds for every Work, the one of completed() too, which is a native
   * promise of Promise.prototype (completedWork()).
   */
  static override [Symbol.hasInstance](value: unknown): boolean {
    return (value !== undefined && value === COMPLETED) || Function.prototype[Symbol.hasInstance].call(this, value);
  }

  /** A Work that has already failed (argument errors found before submission). */
  static rejected<T = void>(err: unknown, call: string): Work<T> {
    return new Work<T>(Promise.reject(err), call);
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
    if (timeoutMs === undefined || this.#done) return this;
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
      this.then(
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

/**
 * The one Work of every call that completed before returning: a resolved native promise
 * whose prototype is Promise.prototype itself, with Work's methods as its own properties.
 * `await` takes such a promise as it is after a check of its map, where for one of a
 * subclass it first looks its `constructor` up (below): about 15 ns, 5 % of an awaited
 * 8-byte all-reduce within a host (perf: Builtins_GetProperty under
 * AsyncFunctionAwaitUncaught). Its own properties are neither `then` nor `constructor`,
 * which would send every promise the slow way.
 */
function completedWork(): Work<void> {
  const done = Promise.resolve();
  const self = (): Promise<void> => done;
  const none = (): void => {};
  const methods: Record<string, () => unknown> = {
    isCompleted: () => true, isFailed: () => false, wait: self, _resolve: none, _reject: none, _fail: none,
  };
  for (const [name, value] of Object.entries(methods)) {
    Object.defineProperty(done, name, { value, enumerable: false, writable: false, configurable: false });
  }
  return done as Work<void>;
}

// `await` and Promise.resolve() take a Work as the promise it is only when its constructor
// is Promise itself; a subclass's own constructor would make them treat it as a foreign
// thenable. Promise's statics (all, race, ...) are unaffected: Work is never built by them.
Object.defineProperty(Work.prototype, 'constructor', { value: Promise, writable: true, configurable: true });
