// comm.register / registerHost (src/comm/nccl/register.ts) on the stand-in NCCL, at the
// current version and at versions before 2.19 and 2.27, and on Gloo.
import { describe, expect, it } from 'vitest';
import { runRanks } from './helpers.js';

const SCRIPT = 'test/gpu/register-worker.mts';

describe('GPUDirect registration', () => {
  it('register, symmetric window and pinned host memory; deregister is idempotent and safe after destroy', async () => {
    const results = await runRanks(2, 'register', {}, 60000, SCRIPT);
    for (const r of results) {
      expect(r.result?.fatal, r.stderr).toBeUndefined();
      expect(r.result?.failures).toEqual([]);
      expect(r.result).toMatchObject({ window: 'window', host: 'host' });
      expect(r.result?.unpinned).toMatchObject({ code: 'ERR_INVALID_ARGUMENT' });
      expect(r.result?.notDevice).toMatchObject({ code: 'ERR_INVALID_ARGUMENT', message: expect.stringMatching(/expected a DeviceBuffer/) });
      expect(r.result?.afterDestroy).toMatchObject({ code: 'ERR_COMM_DESTROYED' });
    }
  }, 90000);

  it('a buffer disposed while registered lives until deregister() or destroy', async () => {
    const results = await runRanks(2, 'disposed', {}, 60000, SCRIPT);
    for (const r of results) {
      expect(r.result?.fatal, r.stderr).toBeUndefined();
      expect(r.result?.failures).toEqual([]);
      expect(r.result).toMatchObject({ deregister: 'ok', windowDeregister: 'ok', destroyed: true });
      expect(r.code).toBe(0);
    }
  }, 90000);

  it('NCCL 2.18: register and registerHost need 2.19, symmetric needs 2.27', async () => {
    const results = await runRanks(2, 'gated', { NCCL_STANDIN_VERSION: '21806' }, 60000, SCRIPT);
    for (const r of results) {
      expect(r.result?.fatal, r.stderr).toBeUndefined();
      expect(r.result?.version).toBe('nccl 2.18.6');
      const where = `on rank ${r.rank} of 2`;
      expect(r.result?.plain).toEqual({ code: 'ERR_UNAVAILABLE', message: `register ${where}: ncclCommRegister needs NCCL >= 2.19 (loaded: NCCL 2.18.6)` });
      expect(r.result?.host).toEqual({ code: 'ERR_UNAVAILABLE', message: `registerHost ${where}: ncclCommRegister needs NCCL >= 2.19 (loaded: NCCL 2.18.6)` });
      expect(r.result?.symmetric).toEqual({ code: 'ERR_UNAVAILABLE', message: `register ${where}: ncclCommWindowRegister needs NCCL >= 2.27 (loaded: NCCL 2.18.6)` });
    }
  }, 90000);

  it('NCCL 2.23: plain registration works, symmetric windows need 2.27', async () => {
    const results = await runRanks(2, 'gated', { NCCL_STANDIN_VERSION: '22304' }, 60000, SCRIPT);
    for (const r of results) {
      expect(r.result?.fatal, r.stderr).toBeUndefined();
      expect(r.result?.plain).toEqual({ kind: 'buffer' });
      expect(r.result?.host).toEqual({ kind: 'host' });
      expect(r.result?.symmetric).toMatchObject({ code: 'ERR_UNAVAILABLE', message: expect.stringMatching(/ncclCommWindowRegister needs NCCL >= 2\.27 \(loaded: NCCL 2\.23\.4\)$/) });
    }
  }, 90000);

  it('Gloo: register is ERR_UNAVAILABLE, naming the backend', async () => {
    const results = await runRanks(2, 'gated', { BACKEND: 'gloo' }, 60000, SCRIPT);
    for (const r of results) {
      expect(r.result?.fatal, r.stderr).toBeUndefined();
      expect(r.result?.plain).toEqual({ code: 'ERR_UNAVAILABLE', message: `register on rank ${r.rank} of 2: buffer registration needs the nccl backend (this communicator uses gloo)` });
      expect(r.result?.host).toMatchObject({ code: 'ERR_UNAVAILABLE' });
    }
  }, 90000);
});
