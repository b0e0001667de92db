/**
 * Native code throws and rejects with NcclNodeError itself (the class src/native.ts
 * hands the addon at load), carrying the stable code and the message native code
 * wrote; no TypeScript wrapping is needed for that. Errors made off the JS thread
 * take the caller's stack where a call site was captured.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { init } from '../../src/comm/init.js';
import { NcclNodeError, fromNative } from '../../src/errors.js';
import { binding } from '../../src/native.js';
import { settle } from '../../src/checkpoint/io.js';

const scratch = mkdtempSync(join(tmpdir(), 'nccl-node-contract-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const gloo = { size: 1, storeHost: '127.0.0.1', storePort: 1, token: 't', prefix: 'p/', timeoutMs: 1000, checkAgreement: true };

describe('errors built by native code', () => {
  it('a synchronous native throw is an NcclNodeError with its code and message, and the caller\'s stack', () => {
    let caught: unknown;
    try {
      void binding().createGloo({ ...gloo, rank: 5 });
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(NcclNodeError);
    const err = caught as NcclNodeError;
    expect(err.code).toBe('ERR_INVALID_ARGUMENT');
    expect(err.message).toBe('createGloo: expected 0 <= rank < size, received rank 5 size 1');
    expect(err.details).toEqual({});
    expect(err.stack).toMatch(/errors\.test\.ts/);
  });

  it('a rejection from a native thread is an NcclNodeError; with a call site it gets the caller\'s stack', async () => {
    const missing = join(scratch, 'no-such-dir', 'x');
    const raw = await binding().ioFsyncDir(missing).then(() => undefined, (e: unknown) => e);
    expect(raw).toBeInstanceOf(NcclNodeError);
    expect((raw as NcclNodeError).code).toBe('ERR_IO');
    expect((raw as NcclNodeError).message).toContain(missing);
    // Made in a completion callback: V8 saw no JavaScript frame.
    expect((raw as NcclNodeError).stack).not.toMatch(/\n {4}at /);

    const viaSettle = await settle(() => binding().ioFsyncDir(missing)).then(() => undefined, (e: unknown) => e);
    expect(viaSettle).toBeInstanceOf(NcclNodeError);
    expect((viaSettle as NcclNodeError).code).toBe('ERR_IO');
    expect((viaSettle as NcclNodeError).message).toBe((raw as NcclNodeError).message);
    expect((viaSettle as NcclNodeError).stack).toMatch(/^NcclNodeError \[ERR_IO\]: .*\n[\s\S]*errors\.test\.ts/);
  });

  it('fromNative leaves an error with frames as it is and still wraps foreign errors', () => {
    const own = new NcclNodeError('ERR_TIMEOUT', 'late');
    const stack = own.stack;
    expect(fromNative(own, new Error('site'))).toBe(own);
    expect(own.stack).toBe(stack);
    const foreign = Object.assign(new Error('odd'), { code: 'ERR_STORE' });
    const wrapped = fromNative(foreign);
    expect(wrapped).toBeInstanceOf(NcclNodeError);
    expect([wrapped.code, wrapped.message]).toEqual(['ERR_STORE', 'odd']);
    expect(fromNative(new Error('x')).code).toBe('ERR_BACKEND');
  });

  it('init() rejects with an NcclNodeError when the native createGloo fails', async () => {
    const err = await init({ backend: 'gloo', rank: 0, worldSize: 1, token: 't', iface: 'nccl-node-no-such-if0', timeoutMs: 20_000 })
      .then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(NcclNodeError);
    expect((err as NcclNodeError).message).toMatch(/nccl-node-no-such-if0/);
  });

  it('setErrorConstructor refuses a non-class with ERR_INVALID_ARGUMENT', () => {
    const b = binding() as unknown as { setErrorConstructor(x: unknown): void };
    expect(() => b.setErrorConstructor(42)).toThrow(expect.objectContaining({
      code: 'ERR_INVALID_ARGUMENT', message: 'setErrorConstructor: expected a class',
    }));
  });
});
