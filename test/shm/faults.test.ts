import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { describeRanks, freePort, runRanks, type RankResult } from '../helpers/ranks.js';

// Faults on the shared-memory path: a rank killed mid all-reduce fails the others
// with the code the TCP path gives for a lost peer (the same scenario run with
// NCCL_NODE_SHM=0 is the reference), within the deadline; no segment outlives the
// job; a segment left under the job's name is replaced, not used.
type Row = { step?: string; ok?: boolean; code?: string; message?: string; ms?: number; stats?: Record<string, number | string> };

const rows = (r: RankResult): Row[] => r.reports as Row[];
const step = (results: RankResult[], name: string): Row[] =>
  results.flatMap((r) => rows(r).filter((x) => x.step === name));
const shmFiles = (name: string): string[] => readdirSync('/dev/shm').filter((f) => `/${f}` === name);

describe('shared-memory path faults', () => {
  it('a rank SIGKILLed mid all-reduce: survivors get ERR_PEER_LOST as over TCP, quickly; nothing left in /dev/shm', async () => {
    const codes: Record<string, string[]> = {};
    for (const shm of ['1', '0']) {
      const results = await runRanks('test/fixtures/shm-fault.ts', 3, { args: ['kill'], env: { NCCL_NODE_SHM: shm }, timeoutMs: 40_000 });
      expect(results[1]!.signal, describeRanks(results)).toBe('SIGKILL');
      for (const r of [results[0]!, results[2]!]) expect(r.code, describeRanks(results)).toBe(0);
      for (const w of step(results, 'warm')) expect(w.ok).toBe(true);
      const survivors = step(results, 'survivor');
      expect(survivors).toHaveLength(2);
      for (const s of survivors) {
        expect(s.ok).toBe(false);
        expect(s.ms!, s.message).toBeLessThan(10_000); // the deadline is 20 s
      }
      codes[shm] = survivors.map((s) => s.code!);
      for (const s of step(results, 'after')) expect(['ERR_COMM_ABORTED', 'ERR_PEER_LOST']).toContain(s.code);
      const warm = step(results, 'warm')[0]!.stats!;
      if (shm === '1') {
        expect(warm.allReduces).toBe(1);
        // The shared-memory wait saw the death (the lock the dead rank held was released).
        expect(survivors.map((s) => s.message).join('\n')).toMatch(/local rank 1 closed its shared-memory segment or died/);
        expect(String(warm.lastSegment)).toMatch(/^\/nccl-node-/);
        expect(shmFiles(String(warm.lastSegment))).toEqual([]);
      } else {
        expect(warm.allReduces).toBe(0);
      }
    }
    expect(codes['1']).toEqual(['ERR_PEER_LOST', 'ERR_PEER_LOST']);
    expect(codes['1']).toEqual(codes['0']);
  }, 60_000);

  it('a stale segment under the job\'s name is replaced, and removed once every rank has mapped the new one', async () => {
    const port = await freePort();
    const env = { NCCL_NODE_SHM: '1', MASTER_PORT: String(port) };
    const first = await runRanks('test/fixtures/shm-fault.ts', 2, { args: ['plain'], env, timeoutMs: 30_000 });
    expect(first.map((r) => r.code), describeRanks(first)).toEqual([0, 0]);
    const name = String(step(first, 'warm')[0]!.stats!.lastSegment);
    expect(name).toMatch(/^\/nccl-node-[0-9a-f]{16}-[0-9a-f]{16}-h0$/);
    expect(shmFiles(name)).toEqual([]);
    // What a killed job could leave: the name, with a header that is not this job's.
    const path = `/dev/shm${name}`;
    writeFileSync(path, Buffer.alloc(1 << 16, 0xab), { mode: 0o600 });
    const second = await runRanks('test/fixtures/shm-fault.ts', 2, { args: ['plain'], env, timeoutMs: 30_000 });
    expect(second.map((r) => r.code), describeRanks(second)).toEqual([0, 0]);
    for (const w of step(second, 'warm')) {
      expect(w.ok).toBe(true);
      expect(w.stats).toMatchObject({ lastSegment: name, segments: 1, allReduces: 1, fallbacks: 0 });
    }
    expect(existsSync(path)).toBe(false);
  }, 60_000);

  it('a segment that cannot be made turns the path off for every rank: TCP, correct results, one line on stderr', async () => {
    // 2 x 2 + 2 chunks of 256 MiB exceed the segment size limit: creation fails before reserving anything.
    const results = await runRanks('test/fixtures/shm-fault.ts', 2, { args: ['plain'], env: { NCCL_NODE_SHM: '1', NCCL_NODE_SHM_CHUNK: String(256 << 20) }, timeoutMs: 30_000 });
    expect(results.map((r) => r.code), describeRanks(results)).toEqual([0, 0]);
    for (const w of step(results, 'warm')) {
      expect(w.ok).toBe(true);
      expect(w.stats).toMatchObject({ segments: 0, allReduces: 0, fallbacks: 1 });
    }
    for (const r of results) expect(r.stderr.match(/shared-memory path off/g), r.stderr).toHaveLength(1);
    expect(results[0]!.stderr).toContain('exceeds the 1 GiB limit');
  }, 60_000);
});
