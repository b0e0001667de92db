// The SDC sentinel: its vote and the bit flips against hand-computed values, then
// 3-rank Gloo TinyLM runs with one fault each (or none), where the sentinel must name
// the rank the fault was injected on, at the first check after it, and nothing else.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { outvoted, crc32cOf, SdcSentinel } from '../../src/metrics/sdc.js';
import { corrupt, FaultInjector } from '../../src/metrics/sdc-inject.js';
import { runRanks } from '../helpers/ranks.js';

interface Out {
  rank: number;
  losses: string[];
  sdc: { events: { step: number; check: string; suspects: number[]; ambiguous: boolean; tensors: string[]; verifier?: number }[]; suspects: number[]; checks: number; replays: number };
  fired: { site: string; tensor: string; element: number; before: string; after: string }[];
  params: number[];
}

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

async function run(payload: Record<string, unknown>, ranks = 3): Promise<Out[]> {
  const res = await runRanks<Out>('test/metrics/health-worker.ts', ranks, { payload: { globalBatch: 6, ...payload }, check: true, timeoutMs: 60_000 });
  return res.map((x) => x.result!);
}

describe('parts', () => {
  it('outvoted: the minority is named; a tie names everyone in it', () => {
    expect(outvoted([[1, 2], [1, 2], [1, 9]])).toEqual({ ranks: [2], tensors: [1], ambiguous: false });
    expect(outvoted([[1, 2], [7, 2], [1, 2], [1, 2]])).toEqual({ ranks: [1], tensors: [0], ambiguous: false });
    expect(outvoted([[1], [2]])).toEqual({ ranks: [0, 1], tensors: [0], ambiguous: true });
    expect(outvoted([[1, 2], [1, 2]])).toEqual({ ranks: [], tensors: [], ambiguous: false });
  });

  it('a low mantissa flip moves a float32 by one ulp and stays finite; the CRC sees it', () => {
    const a = new Float32Array([1.5, -0.25]);
    const crc = crc32cOf(a);
    expect(corrupt(a, 0, { bit: 0 })).toEqual({ before: 1.5, after: 1.5 + 2 ** -23 });
    expect(crc32cOf(a)).not.toBe(crc);
    expect(corrupt(a, 1, { bit: 31 }).after).toBe(0.25); // the sign bit
    expect(() => corrupt(a, 0, { bit: 32 })).toThrow(/0\.\.31/);
  });

  it('bad options are NcclNodeErrors', () => {
    expect(() => new SdcSentinel({ every: -1 })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', message: expect.stringMatching(/every must be a non-negative integer, received -1/) }));
    expect(() => new FaultInjector(0, [{ site: 'cache' as 'gradient', rank: 0, step: 0, index: 0 }])).toThrow(/site must be parameter, optimizer, gradient, collective, received cache/);
    expect(() => new FaultInjector(0, [{ site: 'gradient', rank: 0, step: 0, index: 0 }])).toThrow(/a gradient fault needs the model parameters/);
  });
});

describe('3-rank Gloo TinyLM', () => {
  it('a clean run: every check agrees (no false positive)', async () => {
    const out = await run({ steps: 8, sdc: { every: 1, replayEvery: 1 } });
    for (const r of out) expect(r.sdc).toMatchObject({ events: [], suspects: [], checks: 8, replays: 8 });
  }, 60_000);

  it('a non-NaN flip in a parameter on one rank: named at the next checksum', async () => {
    const out = await run({ steps: 8, sdc: { every: 2, replayEvery: 1 }, faults: [{ site: 'parameter', rank: 2, step: 4, index: 1234, bit: 3 }] });
    const fired = out[2]!.fired[0]!;
    expect(Number.isFinite(Number(fired.after))).toBe(true);
    expect(Number(fired.after)).not.toBe(Number(fired.before));
    // Injected after step 4's optimizer step; the checksums run after steps 1, 3, 5, 7.
    for (const r of out) {
      const sums = r.sdc.events.filter((e) => e.check === 'checksum');
      expect(sums[0]).toMatchObject({ step: 5, suspects: [2], ambiguous: false });
      expect(sums[0]!.tensors).toContain(fired.tensor);
      // The replay (every step) sees rank 2 fail as target and as verifier from step 5 on: it names
      // rank 2, never its neighbours 1 (rank 2's verifier) or 0 (the rank 2 recomputes wrongly).
      const replays = r.sdc.events.filter((e) => e.check === 'replay');
      expect(replays[0]).toMatchObject({ step: 5, suspects: [2] });
      expect(r.sdc.suspects).toEqual([2]);
    }
    expect(out[0]!.params.every(Number.isFinite)).toBe(true);
  }, 60_000);

  it("a flip in one rank's all-reduce result: named at the next checksum, in the log and the registry", async () => {
    const logDir = mkdtempSync(join(tmpdir(), 'nccl-node-sdc-'));
    dirs.push(logDir);
    const out = await run({ steps: 6, logDir, sdc: { every: 1 }, faults: [{ site: 'collective', rank: 1, step: 3, index: 1000, bit: 12 }] });
    expect(out[1]!.fired).toMatchObject([{ site: 'collective', tensor: 'allReduce.result' }]);
    // A non-zero gradient, so the flip is not absorbed (a low bit of a zero gradient vanishes in AdamW's moments).
    expect(Number(out[1]!.fired[0]!.before)).not.toBe(0);
    for (const r of out) expect(r.sdc.events[0]).toMatchObject({ step: 3, check: 'checksum', suspects: [1] });
    // Checks after steps 3, 4, 5 each still see rank 1's parameters differ.
    const lines = readFileSync(join(logDir, 'rank-0.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.filter((l) => l.event === 'sdc').map((l) => [l.step, l.check, l.suspects])).toEqual([3, 4, 5].map((s) => [s, 'checksum', [1]]));
    const prom = (out[0] as unknown as { prom: { name: string; values: { value: number; labels: Record<string, string> }[] }[] }).prom;
    expect(prom.find((m) => m.name === 'nccl_node_sdc_mismatches_total')!.values).toMatchObject([{ value: 3, labels: { check: 'checksum' } }]);
    expect(prom.find((m) => m.name === 'nccl_node_sdc_checks_total')!.values).toMatchObject([{ value: 6, labels: { check: 'checksum' } }]);
  }, 60_000);

  it("a flip in one rank's local gradient: the replicas still agree; the replay names it", async () => {
    const out = await run({ steps: 5, sdc: { every: 1, replayEvery: 1 }, faults: [{ site: 'gradient', rank: 1, step: 2, index: 500, bit: 20 }] });
    const fired = out[1]!.fired[0]!;
    for (const r of out) {
      expect(r.sdc.events).toEqual([{ step: 2, check: 'replay', suspects: [1], ambiguous: false, tensors: [fired.tensor], verifier: 0 }]);
    }
  }, 60_000);

  it('the same under FSDP stage 2 (the checksum compares the gathered parameters): only the replay names it', async () => {
    const out = await run({ steps: 4, parallel: 'fsdp', stage: 2, sdc: { every: 1, replayEvery: 1 }, faults: [{ site: 'gradient', rank: 2, step: 1, index: 4000, bit: 21 }] });
    const fired = out[2]!.fired[0]!;
    for (const r of out) {
      expect(r.sdc).toMatchObject({ checks: 4, replays: 4, suspects: [2] });
      expect(r.sdc.events).toEqual([{ step: 1, check: 'replay', suspects: [2], ambiguous: false, tensors: [fired.tensor], verifier: 1 }]);
    }
  }, 60_000);
});
