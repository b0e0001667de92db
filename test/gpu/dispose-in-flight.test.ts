// DeviceBuffer.dispose() while a collective on it is still queued (docs/gpu.md): the
// memory stays valid until the op settles, so the op runs on what it was given and
// returns the exact result; only later calls see the buffer as disposed.
import { describe, expect, it } from 'vitest';
import { runRanks } from './helpers.js';

describe('disposing a DeviceBuffer under a queued collective', () => {
  it.each([2, 3])('keeps the memory until the op settles (%i ranks)', async (n) => {
    const results = await runRanks(n, 'dispose', {}, 90000, 'test/gpu/dispose-in-flight-worker.mts');
    for (const r of results) {
      expect(r.result?.fatal, r.stderr).toBeUndefined();
      expect(r.code, r.stderr).toBe(0);
      const cases = r.result!.cases as Record<string, { ok: boolean; detail?: string }>;
      expect(Object.keys(cases)).toEqual(['inputDisposed', 'parentOfViewDisposed', 'outputDisposed', 'disposedBeforeRefused']);
      for (const [name, c] of Object.entries(cases)) expect(c.ok, `${name}: ${c.detail}`).toBe(true);
      expect(r.result!.state).toBe('ok');
    }
  }, 120000);
});
