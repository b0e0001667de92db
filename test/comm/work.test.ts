import { describe, expect, it } from 'vitest';
import { isNcclNodeError } from '../../src/errors.js';
import { Work } from '../../src/comm/work.js';

// Work as the promise it is: `await` and Promise.resolve() take it as a native promise
// (its constructor is Promise), so awaiting one costs what awaiting a promise costs; its
// then() and catch() give plain promises; a failure nobody awaits does not surface as an
// unhandled rejection; wait(timeoutMs) bounds the wait; the flags follow the outcome.
const owner = { rank: 1, size: 4, settled: [] as unknown[], _settled(w: unknown) { this.settled.push(w); } };

describe('Work', () => {
  it('is taken as a native promise by Promise.resolve() and await (no thenable job)', async () => {
    const done = Work.completed();
    expect(done).toBeInstanceOf(Promise);
    expect(Work.completed()).toBe(done);
    expect(Promise.resolve(done)).toBe(done);
    const pending = new Work<number>(undefined, 'broadcast', owner);
    expect(Promise.resolve(pending)).toBe(pending);
    // Ordering tells the fast path from a foreign thenable's: awaiting a settled native
    // promise resumes after one microtask, before a chain two steps long.
    const order: string[] = [];
    const chain = Promise.resolve().then(() => order.push('one')).then(() => order.push('two'));
    await done;
    order.push('work');
    await chain;
    expect(order).toEqual(['one', 'work', 'two']);
  });

  it('the completed calls\' Work is a promise of Promise.prototype itself, still a Work', async () => {
    // What V8's await checks to skip the lookup of `constructor`: the prototype, and no own
    // `then` or `constructor` (either would send every promise the slow way).
    const done = Work.completed();
    expect(Object.getPrototypeOf(done)).toBe(Promise.prototype);
    expect(Object.getOwnPropertyNames(done).filter((k) => k === 'then' || k === 'constructor')).toEqual([]);
    expect(done).toBeInstanceOf(Work);
    expect(new Work<number>(undefined, 'broadcast', owner)).toBeInstanceOf(Work);
    expect(Promise.resolve()).not.toBeInstanceOf(Work);
    expect(Object.create(null) instanceof Work).toBe(false);
    expect([done.isCompleted(), done.isFailed()]).toEqual([true, false]);
    expect(done.wait()).toBe(done);
    await expect(done.wait(1)).resolves.toBeUndefined();
  });

  it('Promise\'s statics on Work give plain promises that work', async () => {
    const all = Work.all([Work.completed(), Work.resolve(5)]);
    expect(all).not.toBeInstanceOf(Work);
    expect(await all).toEqual([undefined, 5]);
    await expect(Work.reject(new Error('no')).catch((e: Error) => e.message)).resolves.toBe('no');
    expect(await Work.race([new Promise(() => {}), Work.completed()])).toBeUndefined();
  });

  it('settles through the issuer, tells its owner once, then() and catch() give plain promises', async () => {
    const ok = new Work<number>(undefined, 'allReduce', owner);
    expect(ok.isCompleted()).toBe(false);
    const then = ok.then((v) => v * 2);
    expect(then).not.toBeInstanceOf(Work);
    ok._resolve(21);
    ok._resolve(5);
    expect(ok.isCompleted()).toBe(true);
    expect(ok.isFailed()).toBe(false);
    expect(await then).toBe(42);
    expect(await ok).toBe(21);
    expect(owner.settled.filter((w) => w === ok)).toHaveLength(1);

    const bad = new Work(undefined, 'allGather', owner);
    bad._reject(Object.assign(new Error('peer went away'), { code: 'ERR_TIMEOUT' }));
    expect(bad.isFailed()).toBe(true);
    const caught = await bad.catch((e: unknown) => e);
    expect(isNcclNodeError(caught) && caught.code).toBe('ERR_TIMEOUT');
  });

  it('a failure nobody awaits is not an unhandled rejection; a native promise settles it', async () => {
    const unhandled: unknown[] = [];
    const listener = (r: unknown): void => void unhandled.push(r);
    process.on('unhandledRejection', listener);
    try {
      const failed = Work.rejected(new Error('refused'), 'reduce');
      const fromNative = new Work<string>(Promise.reject(new Error('native failure')), 'gather', owner);
      const fine = new Work<string>(Promise.resolve('value'), 'scatter', owner);
      await new Promise((r) => setTimeout(r, 20));
      expect(unhandled).toEqual([]);
      expect(failed.isFailed() && fromNative.isFailed()).toBe(true);
      expect(await fine).toBe('value');
      await expect(fromNative).rejects.toThrow('native failure');
    } finally {
      process.off('unhandledRejection', listener);
    }
  });

  it('wait(timeoutMs): ERR_TIMEOUT naming the call and rank while pending, the outcome once settled', async () => {
    const w = new Work(undefined, 'allToAll', owner);
    const timedOut = await w.wait(10).catch((e: unknown) => e);
    expect(isNcclNodeError(timedOut) && timedOut.code).toBe('ERR_TIMEOUT');
    expect((timedOut as Error).message).toMatch(/allToAll on rank 1 of 4 did not complete within 10 ms/);
    const bad = await w.wait(-1).catch((e: unknown) => e);
    expect(isNcclNodeError(bad) && bad.code).toBe('ERR_INVALID_ARGUMENT');
    const later = w.wait(1000);
    w._resolve();
    await expect(later).resolves.toBeUndefined();
    await expect(Work.completed().wait(5)).resolves.toBeUndefined();
  });
});
