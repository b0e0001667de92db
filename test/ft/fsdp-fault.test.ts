/**
 * A peer lost in the middle of an FSDP ZeRO-3 step fails the step on the survivor
 * and nothing else: the gather FSDP prefetched for the next unit, and the reductions
 * it started in backward, must not reach the process as unhandled rejections once
 * the communicator is aborted (Node ends a process on one), so an elastic loop
 * (src/ft/hsdp-train.ts) can catch the step's error and re-form.
 */
import { describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';

describe('FSDP: a peer lost mid-step', () => {
  for (const at of ['forward', 'backward'] as const) {
    it(`in ${at}: the survivor's step fails with a communication error and no rejection is left unhandled`, async () => {
      const rs = await runRanks<{ step: number; error: string; unhandled: string[] }>('test/ft/fsdp-fault-worker.ts', 2, { payload: { at }, timeoutMs: 30_000 });
      const why = describeRanks(rs);
      expect(rs[1]!.signal, why).toBe('SIGKILL');
      expect(rs[0]!.code, why).toBe(0);
      const r = rs[0]!.result!;
      expect(r.step).toBe(1);
      expect(['ERR_PEER_LOST', 'ERR_BACKEND', 'ERR_COMM_ABORTED', 'ERR_TIMEOUT']).toContain(r.error);
      expect(r.unhandled).toEqual([]);
    }, 40_000);
  }
});
