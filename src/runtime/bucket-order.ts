/**
 * The DDP launch rule, shared by the host and device wrappers: a bucket's
 * all-reduce starts once all its gradients are ready, and buckets start strictly
 * in index order, so every rank issues the same collectives in the same order
 * whatever order its backward produced gradients in.
 */
import { NcclNodeError } from '../errors.js';

export class BucketOrder<P extends { readonly name: string }, B extends { readonly params: readonly P[] }> {
  readonly #bucketOf = new Map<P, B>();
  readonly #pending = new Map<B, number>();
  readonly #ready = new Set<P>();
  #next = 0;

  constructor(
    private readonly owner: string,
    private readonly buckets: readonly B[],
    private readonly launch: (bucket: B) => void,
  ) {
    for (const b of buckets) {
      this.#pending.set(b, b.params.length);
      for (const p of b.params) this.#bucketOf.set(p, b);
    }
  }

  /** Backward produced `p`'s final gradient: launches every bucket now complete, in order. */
  markReady(p: P): void {
    const b = this.#bucketOf.get(p);
    if (!b) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `markReady: ${p.name} was not registered with ${this.owner}`);
    if (this.#ready.has(p)) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `markReady: ${p.name} was marked ready twice in one backward`);
    this.#ready.add(p);
    this.#pending.set(b, this.#pending.get(b)! - 1);
    while (this.#next < this.buckets.length && this.#pending.get(this.buckets[this.#next]!) === 0) {
      this.launch(this.buckets[this.#next++]!);
    }
  }

  /** Throws, naming them, when some of `params` were never marked ready this backward. */
  assertComplete(params: readonly P[]): void {
    if (this.#next === this.buckets.length) return;
    const missing = params.filter((p) => !this.#ready.has(p)).map((p) => p.name);
    throw new NcclNodeError(
      'ERR_INVALID_ARGUMENT',
      `${this.owner}.finish: gradients never marked ready: ${missing.slice(0, 8).join(', ')}${missing.length > 8 ? ', ...' : ''}; ` +
        'call markReady(param) for every parameter in each synchronised backward',
    );
  }

  /** Ready for the next backward. */
  reset(): void {
    for (const b of this.buckets) this.#pending.set(b, b.params.length);
    this.#ready.clear();
    this.#next = 0;
  }
}
