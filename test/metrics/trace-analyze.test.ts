// Hangs explained: a 3-rank Gloo job where rank 2 never makes one collective dumps one
// trace per rank on the others' timeout, and `nccl-node trace analyze` names rank 2,
// the call and sequence number it missed, and what it did last. Synthetic records
// (expectations written out by hand) cover a mismatched call, a call that never
// completed, ring roll-over, and bad input.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { isNcclNodeError } from '../../src/errors.js';
import type { TraceEntry, TraceFile } from '../../src/comm/flight-record.js';
import { analyzeTraceDir, formatTraceAnalysis } from '../../src/metrics/trace-analyze.js';
import { repoRoot, runRanks } from '../helpers/ranks.js';

const dirs: string[] = [];
const tmp = (): string => {
  const d = mkdtempSync(join(tmpdir(), 'nccl-node-trace-'));
  dirs.push(d);
  return d;
};
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

const cli = (...args: string[]): string =>
  execFileSync(process.execPath, [join(repoRoot, 'bin', 'nccl-node.js'), ...args], { encoding: 'utf8', timeout: 30_000 });

describe('a hang in a 3-rank Gloo job', () => {
  it('dumps one trace per rank and names rank 2, the call it missed and what it did last', async () => {
    const dir = tmp();
    const results = await runRanks('test/metrics/hang-worker.ts', 3, {
      env: { NCCL_NODE_TRACE_DIR: dir, NCCL_NODE_TRACE_POLL_MS: '200' }, payload: { stall: 2, timeoutMs: 1500 }, timeoutMs: 40_000, check: true,
    });
    const reports = results.map((r) => r.reports.find((x) => 'allDumped' in x)!);
    expect(reports.map((r) => r.error)).toEqual(['ERR_TIMEOUT', 'ERR_TIMEOUT', null]);
    expect(reports.every((r) => r.allDumped)).toBe(true);
    // The native engine numbers the timed-out call #3, as the JS record does below.
    for (const r of reports.slice(0, 2)) expect(r.message).toMatch(/^allReduce failed on rank [01] of 3 \(collective #3\)/);
    const files = readdirSync(dir).filter((f) => f.endsWith('.json')).sort();
    expect(files.map((f) => f.replace(/-\d+\.json$/, ''))).toEqual(['nccl-node-trace-rank0', 'nccl-node-trace-rank1', 'nccl-node-trace-rank2']);

    const a = analyzeTraceDir(dir);
    const world = a.comms.find((c) => c.comm === 'world')!;
    expect(world.ranks).toEqual([0, 1, 2]);
    expect(world.agreedThrough).toBe(2);
    const d = world.divergence!;
    expect(d).toMatchObject({ seq: 3, kind: 'missing', stalled: [2] });
    expect(d.calls).toEqual([0, 1].map((rank) => ({ rank, op: 'allReduce', count: 4, dtype: 'float32', peer: -1, state: 'timeout' })));
    const last = d.lastActivity[0]!;
    expect(last).toMatchObject({ rank: 2, lastCompletedSeq: 2, last: { seq: 2, op: 'broadcast', count: 8, peer: 1, state: 'completed' } });
    // Rank 2 dumped on the others' request, after their timeout: idle at least that long.
    expect(last.last!.idleMs).toBeGreaterThanOrEqual(1500);

    const text = cli('trace', 'analyze', dir);
    expect(text).toContain('ranks diverge at #3 (missing)');
    expect(text).toContain('ranks 0, 1 called allReduce #3 (4 x float32): timeout');
    expect(text).toContain('stalled: rank 2 (never called it)');
    expect(text).toMatch(/rank 2 last: broadcast #2 \(8 x float32, root 1\) completed, ended \d+\.\d\d s before its dump; last completed #2/);
    expect(JSON.parse(cli('trace', 'analyze', dir, '--json'))).toEqual(JSON.parse(JSON.stringify(a)));
  }, 60_000);
});

let id = 0;
const entry = (seq: number, op: string, state: string, t: number, extra: Partial<TraceEntry> = {}): TraceEntry =>
  ({ id: id++, seq, op, count: 16, dtype: 'float32', peer: -1, state, enqueuedUs: t, startedUs: t, endedUs: state === 'completed' || state === 'failed' || state === 'timeout' ? t + 100 : 0, ...extra }) as TraceEntry;
const file = (rank: number, size: number, entries: TraceEntry[], dumpedUs = 10_000_000, comm = 'world'): TraceFile => ({
  version: 1, pid: 100 + rank, reason: 'test', dumpedUs,
  communicators: [{ comm, rank, size, lastEnqueuedSeq: Math.max(-1, ...entries.map((e) => e.seq)), lastStartedSeq: -1, lastCompletedSeq: -1, entries }],
});
const write = (files: TraceFile[], native = false): string => {
  const dir = tmp();
  for (const f of files) writeFileSync(join(dir, `nccl-node-${native ? 'fr' : 'trace'}-rank${f.communicators[0]!.rank}-${f.pid}.json`), JSON.stringify(f));
  return dir;
};

describe('trace analyze on synthetic records', () => {
  it('names the rank that called another collective at the same sequence number', () => {
    const common = (t: number) => [entry(0, 'allReduce', 'completed', t), entry(1, 'allGather', 'completed', t + 1000)];
    const dir = write([
      file(0, 3, [...common(0), entry(2, 'allReduce', 'started', 5000)]),
      file(1, 3, [...common(0), entry(2, 'allReduce', 'started', 5100)]),
      // The native recorder gives send/recv sequence number 0: not collective #0.
      file(2, 3, [...common(0), entry(0, 'send', 'completed', 4000, { peer: 1 }), entry(2, 'broadcast', 'started', 5050, { peer: 0 })]),
    ], true);
    const [c] = analyzeTraceDir(dir).comms;
    expect(c!.agreedThrough).toBe(1);
    expect(c!.divergence).toMatchObject({ seq: 2, kind: 'mismatch', stalled: [2] });
    expect(c!.divergence!.calls.map((x) => `${x.rank}:${x.op}:${x.peer}`)).toEqual(['0:allReduce:-1', '1:allReduce:-1', '2:broadcast:0']);
    expect(c!.divergence!.lastActivity[0]!.last).toMatchObject({ seq: 2, op: 'broadcast', state: 'started', idleMs: null });
    const text = formatTraceAnalysis(analyzeTraceDir(dir));
    expect(text).toContain('rank 2 called broadcast #2 (16 x float32, root 0): started');
    expect(text).toContain('stalled: rank 2 (called another collective)');
  });

  it('names the ranks still inside a call the others gave up on, and ranks with no record', () => {
    const dir = write([
      file(0, 4, [entry(0, 'barrier', 'completed', 0), entry(1, 'allReduce', 'timeout', 2000)]),
      file(1, 4, [entry(0, 'barrier', 'completed', 0), entry(1, 'allReduce', 'started', 2000)]),
      file(2, 4, [entry(0, 'barrier', 'completed', 0), entry(1, 'allReduce', 'timeout', 2000)]),
    ]);
    const [c] = analyzeTraceDir(dir).comms;
    expect(c!.absent).toEqual([3]);
    expect(c!.agreedThrough).toBe(0);
    expect(c!.divergence).toMatchObject({ seq: 1, kind: 'incomplete', stalled: [1] });
  });

  it('compares only what every ring still holds, and reports agreement when there is no divergence', () => {
    // Rank 1's ring forgot #0 and #1; every rank completed #2..#4.
    const dir = write([
      file(0, 2, [0, 1, 2, 3, 4].map((s) => entry(s, 'allReduce', 'completed', s * 1000))),
      file(1, 2, [2, 3, 4].map((s) => entry(s, 'allReduce', 'completed', s * 1000))),
    ]);
    const [c] = analyzeTraceDir(dir).comms;
    expect(c!.divergence).toBeNull();
    expect(c!.agreedThrough).toBe(4);
    expect(formatTraceAnalysis(analyzeTraceDir(dir))).toContain('no divergence: every rank made the same calls with the same outcome through #4');
  });

  it('uses the newest dump of a rank and analyses each communicator apart', () => {
    const old = file(1, 2, [entry(0, 'allReduce', 'started', 0)], 1_000);
    const dir = write([
      file(0, 2, [entry(0, 'allReduce', 'completed', 0), entry(1, 'allReduce', 'timeout', 5000)], 9_000),
      { ...old, pid: 7 },
      { ...file(1, 2, [entry(0, 'allReduce', 'completed', 0)], 9_500), pid: 8 },
      { ...file(0, 2, [entry(0, 'reduceScatter', 'completed', 0)], 9_000, 'world/split3:0'), pid: 9 },
      { ...file(1, 2, [entry(0, 'reduceScatter', 'completed', 0)], 9_000, 'world/split3:0'), pid: 10 },
    ]);
    const comms = analyzeTraceDir(dir).comms;
    expect(comms.map((c) => c.comm)).toEqual(['world', 'world/split3:0']);
    expect(comms[0]!.divergence).toMatchObject({ seq: 1, kind: 'missing', stalled: [1] });
    expect(comms[0]!.divergence!.lastActivity[0]).toMatchObject({ rank: 1, lastCompletedSeq: 0, last: { seq: 0, state: 'completed' } });
    expect(comms[1]!.divergence).toBeNull();
  });

  it('refuses a directory without records, and a file that is not one, with ERR_INVALID_ARGUMENT', () => {
    const empty = tmp();
    expect(() => analyzeTraceDir(empty)).toThrow(/expected nccl-node-trace-rank<R>-<pid>.json/);
    writeFileSync(join(empty, 'nccl-node-trace-rank0-1.json'), JSON.stringify({ version: 1, pid: 1, reason: 'x', dumpedUs: 0, communicators: [{ comm: 'world' }] }));
    let err: unknown;
    try { analyzeTraceDir(empty); } catch (e) { err = e; }
    expect(isNcclNodeError(err, 'ERR_INVALID_ARGUMENT')).toBe(true);
    expect((err as Error).message).toMatch(/is not a flight record: communicators\.0\.rank/);
    expect(() => analyzeTraceDir(join(empty, 'nope'))).toThrow(/cannot read .*nope \(ENOENT\)/);
  });
});

describe('the JS flight record of a real job', () => {
  it('numbers calls as the native engine does, and trace analyze names the rank that called another size', async () => {
    const dir = tmp();
    const results = await runRanks('test/metrics/seq-worker.ts', 2, { env: { NCCL_NODE_TRACE_DIR: dir }, timeoutMs: 30_000, check: true });
    const reports = results.map((r) => r.reports.find((x) => 'message' in x)! as { message: string; records: { entries: TraceEntry[] } });
    for (const r of reports) {
      // The native engine's number for the mismatched call, from its own error message.
      const native = Number(/\(collective #(\d+)\)/.exec(r.message)![1]);
      expect(r.message).toMatch(/^ERR_SIZE_MISMATCH: allReduce failed on rank \d of 2 \(collective #\d+\): ranks disagree/);
      const entries = r.records.entries;
      expect(entries.map((e) => [e.seq, e.op, e.state])).toEqual([
        [0, 'allReduce', 'completed'], [1, 'barrier', 'completed'], [2, 'allGather', 'failed'], [3, 'split', 'completed'],
        [-1, reports.indexOf(r) === 0 ? 'send' : 'recv', 'completed'], [4, 'broadcast', 'completed'], [5, 'allReduce', 'failed'],
      ]);
      expect(native).toBe(5);
      for (const e of entries) expect(e.enqueuedUs <= e.startedUs && e.startedUs <= e.endedUs).toBe(true);
    }
    const a = analyzeTraceDir(dir);
    expect(a.comms.map((c) => c.comm)).toEqual(['world', 'world/split3:0']);
    // #2 failed on both ranks alike (both refused it): agreement. At #5 the sizes differ; of a
    // 1-1 tie the group holding rank 0 is taken as intended.
    expect(a.comms[0]!.agreedThrough).toBe(4);
    expect(a.comms[0]!.divergence).toMatchObject({ seq: 5, kind: 'mismatch', stalled: [1] });
    expect(a.comms[0]!.divergence!.calls.map((c) => [c.rank, c.op, c.count, c.state])).toEqual([[0, 'allReduce', 4, 'failed'], [1, 'allReduce', 8, 'failed']]);
    expect(a.comms[1]!.divergence).toBeNull();
    expect(a.comms[1]!.agreedThrough).toBe(0);
  }, 60_000);
});
