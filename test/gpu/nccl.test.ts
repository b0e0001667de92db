// The NCCL backend end to end on the stand-in libraries (built into build/ by
// scripts/setup.sh): every collective x 7 dtypes, group(),
// split, the pre-multiplied sum, the watchdog and the "needs NCCL >= x.y" paths.
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runRanks } from './helpers.js';


describe('nccl backend on the stand-ins', () => {
  for (const n of [2, 4]) {
    it(`every collective, group, split and premulsum at ${n} ranks`, async () => {
      const results = await runRanks(n, 'collectives');
      for (const r of results) {
        expect(r.result?.fatal, r.stderr).toBeUndefined();
        expect(r.code).toBe(0);
        expect(r.result?.backend).toBe('nccl');
        expect(r.result?.failures).toEqual([]);
      }
    }, 120000);
  }

  for (const n of [2, 4]) {
    it(`allToAll with per-peer counts (zeros included) at ${n} ranks`, async () => {
      const results = await runRanks(n, 'alltoallv');
      for (const r of results) {
        expect(r.result?.fatal, r.stderr).toBeUndefined();
        expect(r.code).toBe(0);
        expect(r.result?.failures).toEqual([]);
      }
      // The table has zeros (skipped sends and receives) at every size tested.
      expect(results.flatMap((r) => r.result?.counts as number[])).toContain(0);
    }, 60000);
  }

  it('watchdog: a stalled rank makes its peer fail with ERR_TIMEOUT and writes flight records', async () => {
    // Rank 1 stops moving data in its 2nd AllReduce; rank 0's deadline is shorter.
    const results = await runRanks(2, 'fault', {
      NCCL_STANDIN_FAULT: 'hang:AllReduce:1:2', OP_TIMEOUT_MS_RANK0: '1500', OP_TIMEOUT_MS_RANK1: '5000',
    });
    const [r0, r1] = results.map((r) => r.result as Record<string, any>);
    expect(r0!.error.code).toBe('ERR_TIMEOUT');
    expect(r0!.elapsedMs).toBeGreaterThanOrEqual(1400);
    expect(r0!.elapsedMs).toBeLessThan(4000);
    expect(r0!.state).toBe('broken');
    expect(r1!.error.code).toBe('ERR_TIMEOUT');
    const dir = r0!.frDir as string;
    const files = readdirSync(dir).filter((f) => f.startsWith('nccl-node-fr-rank'));
    expect(files.length).toBe(2);
    const record = JSON.parse(readFileSync(join(dir, files.find((f) => f.includes('rank0'))!), 'utf8'));
    const entries = record.communicators[0].entries;
    expect(entries.map((e: { state: string }) => e.state)).toEqual(['completed', 'timeout']);
    expect(entries[1]).toMatchObject({ seq: 1, op: 'allReduce', count: 3, dtype: 'float32' });
    expect(record.communicators[0].lastCompletedSeq).toBe(0);
    // The JS record (every backend) numbers the calls as the native one and is dumped beside it.
    const js = JSON.parse(readFileSync(join(dir, readdirSync(dir).find((f) => f.startsWith('nccl-node-trace-rank0-'))!), 'utf8'));
    expect(js.communicators[0].entries.map((e: { seq: number; op: string; state: string }) => [e.seq, e.op, e.state]))
      .toEqual(entries.map((e: { seq: number; op: string; state: string }) => [e.seq, e.op, e.state]));
  }, 60000);

  it('peer death: the surviving rank fails with ERR_NCCL quickly, naming the peer', async () => {
    const results = await runRanks(2, 'fault', { NCCL_STANDIN_FAULT: 'exit:AllReduce:1:2', OP_TIMEOUT_MS: '20000' });
    expect(results[1]!.code).toBe(17);  // the stand-in's exit fault
    const r0 = results[0]!.result as Record<string, any>;
    expect(['ERR_NCCL', 'ERR_PEER_LOST']).toContain(r0.error.code);
    expect(r0.error.message).toMatch(/rank 1/);
    expect(r0.elapsedMs).toBeLessThan(10000);
    expect(existsSync(r0.frDir)).toBe(true);
  }, 60000);

  it('NCCL 2.18: newer features say what they need; alltoall/gather fall back to send/recv', async () => {
    const results = await runRanks(2, 'old-nccl', { NCCL_STANDIN_VERSION: '21806' });
    for (const r of results) {
      expect(r.result?.fatal, r.stderr).toBeUndefined();
      expect(r.result?.version).toBe('nccl 2.18.6');
      expect(r.result?.memAlloc).toBe('ncclMemAlloc needs NCCL >= 2.19 (loaded: NCCL 2.18.6)');
      expect(r.result?.failures).toEqual([]);
    }
  }, 60000);
});
