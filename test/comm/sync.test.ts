import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { root, standinEnv } from '../gpu/helpers.js';
import { phaseOf as phase, runPhases } from '../helpers/phases.js';
import { DTYPES } from '../../src/dtypes.js';

// The blocking allReduceSync(): the results of the reference every rank computes,
// over shared memory and over TCP; a refusal on one rank fails the same call on the
// others (no rank waits for a call that will not come) and later calls line up.
type Row = { phase?: string; inFlightBefore?: number; settledAfter?: number; calls?: number; failures?: string[]; codes?: string[]; messages?: string[]; after?: string | number[];
  inFlight?: number; entries?: { op: string; state: string; seq: number; count: number }[]; counted?: number; heldMs?: number;
  resizable?: (string | boolean)[]; shared?: (string | boolean)[]; detached?: string; awaitedResizable?: string;
  stats?: { prepared: number; runs: number; slots: number } | null; consecutive?: boolean; states?: string[] };

const run = (size: number, phases: string, shm: boolean, env: Record<string, string> = {}): Promise<Row[][]> =>
  runPhases('test/fixtures/sync-allreduce.ts', size, phases, { NCCL_NODE_SHM: shm ? '1' : '0', ...env }, 90_000);

describe.each([
  ['shared memory', true],
  ['TCP', false],
])('allReduceSync over %s', (_name, shm) => {
  it('3 ranks: every dtype and op, in place and into out, up to 1.2 MB, equals the reference', async () => {
    const ranks = await run(3, 'values,mismatch,record', shm);
    for (const rows of ranks) {
      const v = phase(rows, 'values');
      expect(v.failures).toEqual([]);
      expect(v.calls).toBeGreaterThan(100);
      // A disagreement fails the call on every rank alike; the next one works.
      expect(phase(rows, 'mismatch').codes).toEqual(['ERR_SIZE_MISMATCH']);
      expect(phase(rows, 'mismatch').after).toEqual([6, 6, 6, 6, 6]);
      const rec = phase(rows, 'record');
      expect(rec.entries!.map((e) => [e.op, e.state, e.count])).toEqual(Array.from({ length: 10 }, () => ['allReduce', 'completed', 3]));
      const seqs = rec.entries!.map((e) => e.seq);
      expect(seqs).toEqual(seqs.map((_, i) => seqs[0]! + i));
      expect(rec.counted).toBe(10);
    }
    // Every rank numbered the calls alike (refused and failed ones included).
    expect(new Set(ranks.map((rows) => phase(rows, 'record').entries![0]!.seq)).size).toBe(1);
  }, 120_000);

  it('calls made again on the same memory run prepared from their second time: same results, errors and records as without', async () => {
    const on = await run(3, 'repeat', shm);
    const off = await run(3, 'repeat', shm, { NCCL_NODE_PREPARE_REPEATED: '0' });
    for (const [r, rows] of on.entries()) {
      const got = phase(rows, 'repeat');
      expect(got.failures).toEqual([]);
      expect(got.codes).toEqual(['ERR_SIZE_MISMATCH', 'ERR_INVALID_ARGUMENT']);
      expect(got.detached).toMatch(/^ERR_INVALID_ARGUMENT: .*detached/);
      expect(got.consecutive).toBe(true);
      // The reference: the same calls with the memory of repeated calls off.
      const ref = phase(off[r]!, 'repeat');
      expect(ref.stats).toBeNull();
      expect(ref.failures).toEqual([]);
      const { stats, ...rest } = got;
      const { stats: _none, ...refRest } = ref;
      expect(rest).toEqual(refRest);
      expect(got.entries).toBe(got.calls);
      // Repeated calls did run prepared: every dtype's array, the reused ones; more
      // arrays in turn than slots were not (each is evicted before it comes back).
      expect(stats!.prepared).toBeGreaterThanOrEqual(DTYPES.length + 4);
      expect(stats!.runs).toBeGreaterThanOrEqual(DTYPES.length + 3 * 10);
      expect(stats!.slots).toBe(8);
    }
  }, 120_000);

  it('calls in flight run first, a recv in flight does not hold it; a call refused on one rank fails the same call on the others', async () => {
    const ranks = await run(2, 'queued,p2p,refused', shm);
    for (const rows of ranks) {
      const q = phase(rows, 'queued');
      expect(q.failures).toEqual([]);
      expect(q.inFlightBefore).toBe(2);
      expect(q.settledAfter).toBe(2);
      expect(q.inFlight).toBe(0);
      // A recv posted before a blocking call and matched by a send after it on the peer.
      expect(phase(rows, 'p2p').failures).toEqual([]);
      expect(phase(rows, 'p2p').heldMs).toBeLessThan(5000);
      const r = phase(rows, 'refused');
      expect(r.codes).toEqual(['ERR_SIZE_MISMATCH']);
      expect(r.after).toBe('');
    }
    // Rank 1's call was fine: it ran, and learnt rank 0's reason from the round.
    expect(phase(ranks[1]!, 'refused').messages![0]).toMatch(/rank 0 rejected its allReduce .*out/);
  }, 60_000);

  it('takes resizable (at their length) and shared memory, refuses a detached buffer; the awaited call refuses resizable memory', async () => {
    const ranks = await run(2, 'memory', shm);
    for (const rows of ranks) {
      const m = phase(rows, 'memory') as Row;
      expect(m.resizable).toEqual(['returned', ...Array(6).fill(true)]);
      expect(m.shared).toEqual(['returned', ...Array(5).fill(true)]);
      expect(m.detached).toMatch(/^ERR_INVALID_ARGUMENT: .*detached/);
      expect(m.awaitedResizable).toMatch(/^ERR_INVALID_ARGUMENT: .*resizable/);
      expect(m.after).toBe('');
    }
  }, 60_000);

  it('a peer that never calls: ERR_TIMEOUT after the call\'s timeout, not a hang', async () => {
    const [r0] = await run(2, 'timeout', shm);
    const t = phase(r0!, 'timeout');
    expect(t.codes).toEqual(['ERR_TIMEOUT']);
    expect(t.heldMs).toBeGreaterThanOrEqual(450);
    expect(t.heldMs).toBeLessThan(2500);
  }, 60_000);
});

describe('allReduceSync where it cannot run', () => {
  /** Runs a TS snippet against src/index.ts with `env` in a child process; returns its JSON output. */
  function snippet(code: string, env: Record<string, string>): any {
    const script = `import * as nn from ${JSON.stringify(join(root, 'src/index.ts'))};\n` +
      `const out = await (async () => { ${code} })();\nconsole.log(JSON.stringify(out));`;
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      env: { ...process.env, ...env }, encoding: 'utf8', timeout: 60_000,
    });
    if (r.status !== 0) throw new Error(`child failed (${r.status}): ${r.stderr}`);
    return JSON.parse(r.stdout.trim().split('\n').pop()!);
  }
  const attempt = `(f) => { try { f(); return 'returned'; } catch (e) { return e.code + ': ' + e.message; } }`;

  it('NCCL: ERR_UNAVAILABLE, and the communicator goes on; Gloo with a device buffer: ERR_INVALID_ARGUMENT', () => {
    const out = snippet(`
      const attempt = ${attempt};
      const nccl = await nn.init({ backend: 'nccl', rank: 0, worldSize: 1, token: 't' });
      const onNccl = attempt(() => nccl.allReduceSync(new Float32Array(4)));
      const d = await nn.DeviceBuffer.from(new Float32Array([1, 2]));
      await nccl.allReduce(d);
      const after = Array.from(await d.toHost());
      await nccl.destroy();
      const gloo = await nn.init({ backend: 'gloo', rank: 0, worldSize: 1, token: 't' });
      const onDevice = attempt(() => gloo.allReduceSync(d));
      const one = Array.from(gloo.allReduceSync(new Int32Array([5, -6]), { op: 'max' }));
      const kept = new Int32Array([7]);
      for (let i = 0; i < 3; i++) gloo.allReduceSync(kept);
      const prepared = gloo._repeatedCalls.prepared;
      await gloo.destroy();
      const destroyed = attempt(() => gloo.allReduceSync(new Int32Array(1)));
      const keptDestroyed = attempt(() => gloo.allReduceSync(kept));
      return { onNccl, after, onDevice, one, destroyed, prepared, keptDestroyed };`, standinEnv());
    expect(out.onNccl).toMatch(/^ERR_UNAVAILABLE: allReduce on rank 0 of 1: the nccl backend does not run blocking calls/);
    expect(out.after).toEqual([1, 2]);
    expect(out.onDevice).toMatch(/^ERR_INVALID_ARGUMENT: .*allReduceSync takes a host array, received a device buffer/);
    expect(out.one).toEqual([5, -6]);
    expect(out.destroyed).toMatch(/^ERR_COMM_DESTROYED/);
    // A call prepared because it was repeated is refused after destroy() as any other.
    expect(out.prepared).toBe(1);
    expect(out.keptDestroyed).toMatch(/^ERR_COMM_DESTROYED: allReduce on rank 0 of 1: the communicator was destroyed/);
  }, 60_000);
});
