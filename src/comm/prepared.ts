/**
 * An all-reduce checked once and made again and again: the persistent form of
 * Communicator.allReduceSync (run()) and allReduce (start()), as MPI 4's
 * MPI_Allreduce_init with MPI_Start. For the small exchange every step makes (a loss, a
 * gradient norm, a stop flag), where checking arguments, reading the array's memory and
 * building the native call cost more than the shared-memory round itself
 * (bench/shm/allreduce.ts: shmPrepared against shmSync).
 *
 * The prepared call holds its arrays' memory until free(): write the input into the
 * same array before each run() or start(), read the result from it (or from `out`)
 * after (for start(), once its Work settled).
 */
import { performance } from 'node:perf_hooks';
import type { DType, HostArray } from '../dtypes.js';
import type { NativePreparedCall } from '../native.js';
import { collectiveEnded, type CollectiveClock } from '../metrics/collectives.js';
import type { FlightRecord } from './flight-record.js';
import { Work } from './work.js';
import { MONOTONIC_ORIGIN_MS } from './monotonic.js';

/**
 * A blocking all-reduce (allReduceSync, a prepared run()) that has returned or thrown
 * `error`: its flight record entry and its collective totals, written afterwards from
 * its times (performance.now() readings), since the JS thread was held for the whole call
 * and nothing could have read them in between. Throws `error` when the call failed.
 */
export function recordBlockingAllReduce(record: FlightRecord, clock: CollectiveClock, count: number, dtype: DType,
  bytes: number, started: number, ended: number, failed: boolean, error: unknown): void {
  const entry = record.begin('allReduce', count, dtype, -1, started);
  if (failed) {
    record.failed(entry, error, ended);
    collectiveEnded(clock, 'allReduce', bytes, started, false, ended);
    throw error;
  }
  record.completed(entry, ended);
  collectiveEnded(clock, 'allReduce', bytes, started, true, ended);
}

/** @internal The Work of a started call that did not complete before returning: `started` is its promise. */
export type StartedWork = (started: Promise<unknown>, submitted: number, ended: number) => Work;

export class PreparedAllReduce<B extends HostArray> {
  readonly #native: NativePreparedCall;
  readonly #clock: CollectiveClock;  // the communicator's, for the collective totals
  readonly #record: FlightRecord;
  readonly #result: B;
  readonly #count: number;
  readonly #dtype: DType;
  readonly #bytes: number;
  readonly #stamps: Float64Array;
  readonly #workOf: StartedWork;
  #freed = false;

  /**
   * @internal Made by Communicator.prepareAllReduce: `stamps` is the Float64Array of 2
   * the native call was prepared with, where each run() leaves its entry and exit times;
   * `workOf` makes start()'s Work, as the communicator makes a submitted call's.
   */
  constructor(native: NativePreparedCall, stamps: Float64Array, clock: CollectiveClock, record: FlightRecord, result: B,
    count: number, dtype: DType, bytes: number, workOf: StartedWork) {
    this.#native = native;
    this.#stamps = stamps;
    this.#clock = clock;
    this.#record = record;
    this.#result = result;
    this.#count = count;
    this.#dtype = dtype;
    this.#bytes = bytes;
    this.#workOf = workOf;
  }

  /** The array the result lands in: the input, or `out` when it was given. */
  get result(): B {
    return this.#result;
  }

  /** Whether free() was called. */
  get freed(): boolean {
    return this.#freed;
  }

  /**
   * The all-reduce, blocking, as allReduceSync() makes it (in the communicator's
   * sequence, after calls still in flight): returns the result array when every rank
   * has contributed, or throws. A run after free(), or on memory that was transferred
   * since, is refused (ERR_INVALID_ARGUMENT) and the other ranks fail the same call.
   */
  run(): B {
    let error: unknown;
    try {
      this.#native.run();
    } catch (err) {
      error = err;
    }
    recordBlockingAllReduce(this.#record, this.#clock, this.#count, this.#dtype, this.#bytes,
      this.#stamps[0]! - MONOTONIC_ORIGIN_MS, this.#stamps[1]! - MONOTONIC_ORIGIN_MS, error !== undefined, error);
    return this.#result;
  }

  /**
   * The all-reduce, not blocking, as allReduce() makes it (MPI_Start): returns its Work,
   * in the communicator's sequence like any call. Within a host, when nothing of the
   * communicator is in flight and the other ranks are in, it completes before returning
   * (a completed Work); otherwise it goes on on the communicator's thread and the JS
   * thread is free meanwhile. Refused as run() is (thrown, the other ranks failing the
   * same call). Keep the arrays as they are until the Work settles.
   */
  start(): Work {
    let started: Promise<void> | undefined;
    try {
      started = this.#native.start();
    } catch (err) {
      recordBlockingAllReduce(this.#record, this.#clock, this.#count, this.#dtype, this.#bytes,
        this.#stamps[0]! - MONOTONIC_ORIGIN_MS, performance.now(), true, err);
    }
    const stamps = this.#stamps;
    if (started === undefined) {
      // Completed before returning: recorded as a blocking call is, and the one settled Work.
      recordBlockingAllReduce(this.#record, this.#clock, this.#count, this.#dtype, this.#bytes,
        stamps[0]! - MONOTONIC_ORIGIN_MS, stamps[1]! - MONOTONIC_ORIGIN_MS, false, undefined);
      return Work.completed();
    }
    return this.#workOf(started, stamps[0]! - MONOTONIC_ORIGIN_MS, 0);
  }

  /** Lets the arrays' memory go; run() and start() are refused after it. Idempotent. */
  free(): void {
    this.#freed = true;
    this.#native.free();
  }

  [Symbol.dispose](): void {
    this.free();
  }
}
