import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { root, standinEnv } from '../gpu/helpers.js';
import { expectRecordedInSequence, phaseOf as phase, runPhases } from '../helpers/phases.js';

// prepareAllReduce(): a blocking all-reduce checked once and run again and again. Its
// results against the reference every rank computes, over shared memory and over TCP,
// in the same sequence as every other call; a refused run on one rank fails the same
// call on the others; the memory it holds; the flight record and metrics it feeds.
type Row = { phase?: string; calls?: number; failures?: string[]; codes?: string[]; messages?: string[]; after?: number[];
  inFlightBefore?: number; settledAfter?: number; inFlight?: number; freed?: boolean; heldMs?: number;
  resizable?: string; overlapping?: string; shared?: (string | boolean)[] };

const run = (size: number, phases: string, shm: boolean): Promise<Row[][]> =>
  runPhases('test/fixtures/prepared-allreduce.ts', size, phases, { NCCL_NODE_SHM: shm ? '1' : '0' }, 90_000);

describe.each([
  ['shared memory', true],
  ['TCP', false],
])('prepareAllReduce over %s', (_name, shm) => {
  it('3 ranks: every dtype and op, in place and into out, up to 1.2 MB, run three times each, equals the reference', async () => {
    const ranks = await run(3, 'values,mismatch,record', shm);
    for (const rows of ranks) {
      const v = phase(rows, 'values');
      expect(v.failures).toEqual([]);
      expect(v.calls).toBeGreaterThan(300);
      expect(phase(rows, 'mismatch').codes).toEqual(['ERR_SIZE_MISMATCH']);
      expect(phase(rows, 'mismatch').after).toEqual([6, 6, 6, 6, 6]);
    }
    expectRecordedInSequence(ranks, 'record', 3);
  }, 120_000);

  it('runs after calls in flight; a run refused on one rank (freed, memory transferred) fails the same call on the others', async () => {
    const ranks = await run(2, 'queued,refused,memory', shm);
    for (const rows of ranks) {
      const q = phase(rows, 'queued');
      expect(q.failures).toEqual([]);
      expect(q.inFlightBefore).toBe(2);
      expect(q.settledAfter).toBe(2);
      expect(q.inFlight).toBe(0);
      const r = phase(rows, 'refused');
      expect(r.codes).toEqual(['ERR_INVALID_ARGUMENT', 'ERR_INVALID_ARGUMENT']);
      expect(r.after).toEqual([3, 3, 3, 3, 3]);
      expect(r.freed).toBe(true);
      const m = phase(rows, 'memory');
      expect(m.resizable).toMatch(/^ERR_INVALID_ARGUMENT: .*resizable/);
      expect(m.overlapping).toMatch(/^ERR_INVALID_ARGUMENT: .*overlaps the input.*prepare it in place or apart/);
      expect(m.shared).toEqual(['returned', ...Array(5).fill(true)]);
    }
    const [m0, m1] = ranks.map((rows) => phase(rows, 'refused').messages!);
    expect(m0![0]).toMatch(/freed/);
    expect(m0![1]).toMatch(/detached/);
    // Rank 1's runs were fine: they failed with rank 0's reasons, learnt from the round.
    expect(m1![0]).toMatch(/rank 0 rejected its allReduce.*freed/);
    expect(m1![1]).toMatch(/rank 0 rejected its allReduce.*detached/);
  }, 60_000);

  it('a peer that never runs: ERR_TIMEOUT after the call\'s timeout, not a hang', async () => {
    const [r0] = await run(2, 'timeout', shm);
    const t = phase(r0!, 'timeout');
    expect(t.codes).toEqual(['ERR_TIMEOUT']);
    expect(t.heldMs).toBeGreaterThanOrEqual(450);
    expect(t.heldMs).toBeLessThan(2500);
  }, 60_000);
});

describe('prepareAllReduce where it cannot run', () => {
  it('NCCL: ERR_UNAVAILABLE; a device buffer: ERR_INVALID_ARGUMENT; after destroy(): ERR_COMM_DESTROYED', () => {
    const script = `import * as nn from ${JSON.stringify(join(root, 'src/index.ts'))};
      const attempt = (f) => { try { f(); return 'returned'; } catch (e) { return e.code + ': ' + e.message; } };
      const nccl = await nn.init({ backend: 'nccl', rank: 0, worldSize: 1, token: 't' });
      const onNccl = attempt(() => nccl.prepareAllReduce(new Float32Array(4)));
      const d = await nn.DeviceBuffer.from(new Float32Array([1, 2]));
      await nccl.destroy();
      const gloo = await nn.init({ backend: 'gloo', rank: 0, worldSize: 1, token: 't' });
      const onDevice = attempt(() => gloo.prepareAllReduce(d));
      const v = new Int32Array([5, -6]);
      const call = gloo.prepareAllReduce(v, { op: 'max' });
      const one = Array.from(call.run());
      await gloo.destroy();
      const destroyed = attempt(() => call.run());
      console.log(JSON.stringify({ onNccl, onDevice, one, destroyed }));`;
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      env: { ...process.env, ...standinEnv() }, encoding: 'utf8', timeout: 60_000,
    });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!);
    expect(out.onNccl).toMatch(/^ERR_UNAVAILABLE: allReduce on rank 0 of 1: the nccl backend does not run blocking calls/);
    expect(out.onDevice).toMatch(/^ERR_INVALID_ARGUMENT: .*prepareAllReduce takes a host array, received a device buffer/);
    expect(out.one).toEqual([5, -6]);
    expect(out.destroyed).toMatch(/^ERR_COMM_DESTROYED/);
  }, 60_000);
});
