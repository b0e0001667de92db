/**
 * Host staging memory for checkpoint snapshots, kept between saves. On machines
 * where the first write to fresh memory is two orders of magnitude slower than a
 * write to memory already touched (page faults, and on virtual machines the
 * hypervisor's), a snapshot into newly allocated buffers stalls the training
 * step for seconds per GiB; a snapshot into pooled, already touched memory is a
 * memcpy. The pool holds at most `budgetBytes` in large slabs, hands out
 * page-aligned ranges of them (first fit), takes them back when a save has
 * committed, and can allocate and touch slabs ahead of the first save on the
 * addon's I/O threads (reserve()) so that save is as fast as the later ones.
 * A request the budget cannot hold gets memory of its own, outside the pool.
 */
import { io, settle } from './io.js';

/** Ranges start on page boundaries: no two saves share a cache line or a page. */
const ALIGN = 4096;
/** Slabs made on demand hold at least this much (later pieces of the same save fit in them). */
const MIN_SLAB = 64 << 20;
/** Upper size of one slab (a single piece larger than this gets a slab of its own size). */
const MAX_SLAB = 1 << 30;
/** Touching goes through the addon's parallel copy in chunks of this size, from a zero source. */
const TOUCH_CHUNK = 4 << 20;

const alignUp = (n: number) => Math.ceil(n / ALIGN) * ALIGN;

interface Slab {
  buf: ArrayBuffer;
  /** Touched and free of the background writer: ranges may be handed out. */
  ready: boolean;
  /** Free ranges [offset, length), sorted by offset, never adjacent. */
  free: Array<[number, number]>;
  /** Handed-out ranges: offset -> length. */
  used: Map<number, number>;
}

export interface HostPoolStats {
  budgetBytes: number;
  /** Bytes held in slabs (never above the budget). */
  heldBytes: number;
  /** Bytes of those handed out now. */
  inUseBytes: number;
  slabs: number;
  /** Requests served from touched, pooled memory. */
  hits: number;
  /** Requests that made a new slab (its memory is fresh: the slow first write). */
  misses: number;
  /** Requests the budget could not hold: memory outside the pool, dropped after use. */
  overBudget: number;
}

export class HostPool {
  readonly budgetBytes: number;
  readonly #slabs = new Map<ArrayBuffer, Slab>();
  #held = 0;
  #inUse = 0;
  #hits = 0;
  #misses = 0;
  #over = 0;

  constructor(budgetBytes: number) {
    this.budgetBytes = Math.max(0, Math.floor(budgetBytes));
  }

  /** `n` bytes: a range of a ready slab, else a new slab within the budget, else memory of its own. */
  take(n: number): Uint8Array {
    if (n === 0) return new Uint8Array(0);
    const need = alignUp(n);
    for (const s of this.#slabs.values()) {
      if (!s.ready) continue;
      const at = fit(s, need);
      if (at !== undefined) {
        this.#hits++;
        this.#inUse += need;
        return new Uint8Array(s.buf, at, n);
      }
    }
    const size = Math.max(need, Math.min(MIN_SLAB, this.budgetBytes - this.#held));
    if (this.#held + size > this.budgetBytes) {
      this.#over++;
      return new Uint8Array(n);
    }
    this.#misses++;
    const s = this.#add(size, true);
    this.#inUse += need;
    return new Uint8Array(s.buf, fit(s, need)!, n);
  }

  /** Takes back a range from take(); memory that is not the pool's is left to the collector. */
  give(bytes: Uint8Array): void {
    const s = this.#slabs.get(bytes.buffer as ArrayBuffer);
    const len = s?.used.get(bytes.byteOffset);
    if (!s || len === undefined) return;
    s.used.delete(bytes.byteOffset);
    this.#inUse -= len;
    release(s, bytes.byteOffset, len);
  }

  /**
   * Holds at least min(bytes, budget) in slabs large enough for `largest` bytes each,
   * allocated now and touched on the addon's I/O threads (the JS thread runs on);
   * resolves once they are ready. Ranges of a slab are handed out only after that.
   */
  async reserve(bytes: number, largest = 0): Promise<void> {
    const target = Math.min(this.budgetBytes, alignUp(bytes));
    const fresh: Slab[] = [];
    const slabBytes = Math.min(MAX_SLAB, Math.max(alignUp(largest), 256 << 20));
    while (this.#held < target) {
      const size = Math.min(this.budgetBytes - this.#held, Math.max(alignUp(largest), Math.min(slabBytes, target - this.#held)));
      if (size < alignUp(largest) || size <= 0) break;
      fresh.push(this.#add(size, false));
    }
    if (fresh.length === 0) return;
    const zero = new Uint8Array(TOUCH_CHUNK);
    const dsts: Uint8Array[] = [];
    for (const s of fresh) {
      for (let off = 0; off < s.buf.byteLength; off += TOUCH_CHUNK) dsts.push(new Uint8Array(s.buf, off, Math.min(TOUCH_CHUNK, s.buf.byteLength - off)));
    }
    try {
      await settle(() => io().ioCopy(dsts, dsts.map((d) => zero.subarray(0, d.byteLength))));
    } finally {
      for (const s of fresh) s.ready = true;
    }
  }

  stats(): HostPoolStats {
    return { budgetBytes: this.budgetBytes, heldBytes: this.#held, inUseBytes: this.#inUse, slabs: this.#slabs.size, hits: this.#hits, misses: this.#misses, overBudget: this.#over };
  }

  /** Drops every slab; ranges still handed out stay valid for their holders. */
  dispose(): void {
    this.#slabs.clear();
    this.#held = 0;
    this.#inUse = 0;
  }

  #add(size: number, ready: boolean): Slab {
    const s: Slab = { buf: new ArrayBuffer(size), ready, free: [[0, size]], used: new Map() };
    this.#slabs.set(s.buf, s);
    this.#held += size;
    return s;
  }
}

/** First fit in a slab's free list; records the range as used. */
function fit(s: Slab, need: number): number | undefined {
  for (let i = 0; i < s.free.length; i++) {
    const [off, len] = s.free[i]!;
    if (len < need) continue;
    if (len === need) s.free.splice(i, 1);
    else s.free[i] = [off + need, len - need];
    s.used.set(off, need);
    return off;
  }
  return undefined;
}

/** Returns [off, off + len) to the free list, merged with its neighbours. */
function release(s: Slab, off: number, len: number): void {
  const f = s.free;
  let i = 0;
  while (i < f.length && f[i]![0] < off) i++;
  f.splice(i, 0, [off, len]);
  if (i + 1 < f.length && f[i]![0] + f[i]![1] === f[i + 1]![0]) {
    f[i] = [f[i]![0], f[i]![1] + f[i + 1]![1]];
    f.splice(i + 1, 1);
  }
  if (i > 0 && f[i - 1]![0] + f[i - 1]![1] === f[i]![0]) {
    f[i - 1] = [f[i - 1]![0], f[i - 1]![1] + f[i]![1]];
    f.splice(i, 1);
  }
}
