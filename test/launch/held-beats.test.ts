/**
 * Heartbeats while a blocking call holds a rank's event loop (docs/launcher.md, "Failure
 * detection"). Under `nccl-node run` a rank's heartbeat is a JavaScript timer, so a rank
 * waiting in allReduceSync() (or a prepared call's run()) for a late peer writes none; the native side writes them
 * for as long as the call waits, and only then: a rank whose own JavaScript holds the
 * loop is still taken for hung.
 */
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';

const JOB = 'test/launch/fixtures/job.mts';
// The launcher's timeout is 3 intervals; the late rank is 4 timeouts late.
const flags = (interval = '0.25'): string[] => ['--nproc-per-node', '2', '--max-restarts', '0', '--heartbeat-interval', interval,
  '--heartbeat-timeout', '0.75', '--join-timeout', '30'];
const LATE_MS = 3000;

interface Report { rank: number; sum: number; want: number; waitedMs: number; heldBeats: number }
const reportsOf = (out: string): Report[] =>
  out.split('\n').filter((l) => l.includes('@@')).map((l) => JSON.parse(l.slice(l.indexOf('@@') + 2)) as Report)
    .sort((a, b) => a.rank - b.rank);

describe('heartbeats of a rank held in a blocking call', { timeout: 60_000 }, () => {
  // Over TCP with an interval of a fractional millisecond count (250.5 ms), which the
  // native thread takes rounded.
  // And a prepared call's run(), over shared memory.
  it.each([['shared memory', 'held', '1', '0.25'], ['TCP', 'held', '0', '0.2505'], ['shared memory', 'prepared', '1', '0.25']])(
    'over %s: a rank waiting 3 s in a blocking call (%s) for a late peer is not taken for hung, and the sum is right',
    async (_name, mode, shm, interval) => {
      const r = await runCli(['run', ...flags(interval), JOB, mode, '1', String(LATE_MS)], { NCCL_NODE_SHM: shm });
      expect(r.err).not.toMatch(/missed heartbeats|heartbeats during blocking calls are off/);
      expect(r.code, r.err).toBe(0);
      const reports = reportsOf(r.out);
      expect(reports.map((x) => [x.rank, x.sum])).toEqual([[0, 3], [1, 3]]);
      // Rank 0 was held for about as long as rank 1 was late, and its native thread beat
      // for it (every half interval, 0.125 s); rank 1 was never held.
      expect(reports[0]!.waitedMs).toBeGreaterThanOrEqual(LATE_MS - 200);
      expect(reports[0]!.heldBeats).toBeGreaterThanOrEqual(10);
      expect(reports[1]!.heldBeats).toBe(0);
    },
  );

  it('a rank whose own JavaScript holds its event loop for 3 s is still taken for hung', async () => {
    const r = await runCli(['run', ...flags(), JOB, 'spin', '1', String(LATE_MS)], {});
    expect(r.code).not.toBe(0);
    expect(r.err).toMatch(/rank 1 \(pid \d+\) missed heartbeats for \d+\.\d s \(timeout 0\.75 s\): hung or stopped/);
  });

  it('the native side refuses bad options, naming the field', async () => {
    const { binding } = await import('../../src/native.js');
    const good = { host: '127.0.0.1', port: 1, token: 't', key: 'k', pid: 1, intervalMs: 250 };
    for (const [bad, field] of [[{ host: '' }, 'host'], [{ port: 0 }, 'port'], [{ intervalMs: 0.5 }, 'intervalMs'], [{ key: 3 }, 'key']] as const) {
      expect(() => binding().heldBeatsStart({ ...good, ...bad } as never)).toThrow(expect.objectContaining({
        code: 'ERR_INVALID_ARGUMENT', message: expect.stringContaining(`heldBeatsStart: ${field} must be`) }));
    }
  });
});
