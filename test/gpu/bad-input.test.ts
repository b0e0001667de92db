// Bad input on the NCCL backend (over the stand-in libraries): host arrays, wrong
// sizes, bad roots and peers, disposed DeviceBuffers and views of disposed ones.
// Each is a clear NcclNodeError naming the call and the rank, nothing hangs, and
// the communicator stays usable: a correct all-reduce right after works on every rank.
import { describe, expect, it } from 'vitest';
import { runRanks } from './helpers.js';

const expected: Record<string, { code: string; text: RegExp }> = {
  hostArray: { code: 'ERR_INVALID_ARGUMENT', text: /DeviceBuffer.*host memory|host memory.*DeviceBuffer/ },
  hostOut: { code: 'ERR_INVALID_ARGUMENT', text: /DeviceBuffer.*host memory|host memory.*DeviceBuffer/ },
  allGatherSize: { code: 'ERR_SIZE_MISMATCH', text: /output holds \d+ float32 elements, expected \d+/ },
  reduceScatterSize: { code: 'ERR_SIZE_MISMATCH', text: /input holds \d+ float32 elements, expected \d+/ },
  outSize: { code: 'ERR_SIZE_MISMATCH', text: /out holds 2 float32 elements, expected 4/ },
  dtypeClash: { code: 'ERR_INVALID_ARGUMENT', text: /dtype/ },
  badRoot: { code: 'ERR_INVALID_ARGUMENT', text: /root must be a rank in 0\.\.\d+, received \d+/ },
  negativeRoot: { code: 'ERR_INVALID_ARGUMENT', text: /root/ },
  peerSelf: { code: 'ERR_INVALID_ARGUMENT', text: /peer must be another rank/ },
  peerRange: { code: 'ERR_INVALID_ARGUMENT', text: /peer must be another rank/ },
  disposed: { code: 'ERR_INVALID_ARGUMENT', text: /disposed/ },
  detachedView: { code: 'ERR_INVALID_ARGUMENT', text: /disposed/ },
  fakeDevice: { code: 'ERR_INVALID_ARGUMENT', text: /expected .*received .*not a DeviceBuffer/ },
};

describe('bad input on the nccl backend', () => {
  it.each([2, 3])('is refused with a clear code and leaves the %i ranks in step', async (n) => {
    const results = await runRanks(n, 'badInput', {}, 90000, 'test/gpu/bad-input-worker.mts');
    for (const r of results) {
      expect(r.result?.fatal, r.stderr).toBeUndefined();
      expect(r.code, r.stderr).toBe(0);
      const steps = r.result!.steps as Record<string, { ok: boolean; code?: string; message?: string; healthy: boolean; detail?: string }>;
      for (const [name, want] of Object.entries(expected)) {
        const s = steps[name]!;
        expect(s.ok, name).toBe(false);
        expect(s.code, `${name}: ${s.message}`).toBe(want.code);
        expect(s.message, name).toMatch(want.text);
        expect(s.message, name).toMatch(new RegExp(`on rank ${r.rank} of ${n}`));
      }
      // Host memory in a send/recv pair: both sides refuse it.
      if (r.rank < 2) expect(steps.hostSend!.code).toBe('ERR_INVALID_ARGUMENT');
      for (const [name, s] of Object.entries(steps)) expect(s.healthy, `after ${name}: ${s.detail}`).toBe(true);
      expect(r.result!.state).toBe('ok');
    }
  }, 120000);
});
