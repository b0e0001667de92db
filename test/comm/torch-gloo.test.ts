/**
 * The CPU backend over its own TCP connections (NCCL_NODE_SHM=0, as between hosts)
 * against the real torch.distributed on Gloo (torch's CPU wheel, test/launch/torch-venv.ts)
 * on the same inputs: int32 all-reduce, all-gather, reduce-scatter, all-to-all (equal
 * blocks and per-pair counts, up to 65537 elements), broadcast, reduce, gather and
 * scatter (rotating roots), whose exact results have one
 * right answer whatever the algorithm, at 2, 3 and 4 ranks; and at 2
 * ranks the float32 all-reduce too (two addends: every correctly rounded sum is the same
 * bits). Element counts cover the agreement round that carries small calls (up to
 * 64 KiB), the two-round all-reduce beyond 2 ranks and the ring beyond both, including an in-place all-reduce whose 5 MiB blocks
 * wrap the ring's 4 MiB receive window at 2 ranks.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { runProcess } from '../helpers/cli.js';
import { describeRanks, runRanks } from '../helpers/ranks.js';
import { torchVenv, type TorchVenv } from '../launch/torch-venv.js';

const SIZES = '1,7,1000,16384,65537,2500009';
const TORCH_JOB = 'test/fixtures/torch_gloo_colls.py';

interface Report { rank: number; size: number; rows: { case: string; digest: string }[]; stats?: Record<string, number> }

let venv: TorchVenv;

beforeAll(async () => {
  venv = await torchVenv();
}, 20 * 60_000);

async function torchRun(size: number): Promise<Report[]> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'torch-gloo-'));
  try {
    const r = await runProcess(venv.torchrun, ['--standalone', '--nproc-per-node', String(size), TORCH_JOB, SIZES],
      { NCCL_NODE_TEST_REPORTS: dir, OMP_NUM_THREADS: '1' }, 180_000);
    expect({ code: r.code, err: r.code === 0 ? '' : r.err.slice(-3000) }).toEqual({ code: 0, err: '' });
    return readdirSync(dir).flatMap((f) => readFileSync(path.join(dir, f), 'utf8').split('\n').filter(Boolean))
      .map((l) => JSON.parse(l) as Report).sort((a, b) => a.rank - b.rank);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('over the own TCP connections, against torch.distributed on Gloo', () => {
  it.each([2, 3, 4])('%i ranks: all-reduce, all-gather, reduce-scatter, all-to-all and the rooted collectives give torch\'s bits', async (size) => {
    const torch = await torchRun(size);
    const ours = await runRanks<Report>('test/fixtures/torch-gloo-colls.ts', size, {
      args: [SIZES], env: { NCCL_NODE_SHM: '0' }, timeoutMs: 180_000,
    });
    expect(ours.map((r) => r.code), describeRanks(ours)).toEqual(ours.map(() => 0));
    expect(torch.map((r) => r.rank)).toEqual([...Array(size).keys()]);
    const counts = SIZES.split(',').map(Number);
    const cases = counts.reduce((sum, n) => sum + (size === 2 ? 4 : 3) + (n <= 65537 ? 2 : 0) + 4, 0);
    for (const result of ours) {
      const mine = result.reports[0] as unknown as Report;
      const theirs = torch[mine.rank]!;
      expect(mine.rows).toHaveLength(cases);
      expect(mine.rows).toEqual(theirs.rows);
      // Both paths ran: the agreement round carried the small calls, the ring the rest.
      const stats = mine.stats!;
      expect(stats.tcpRingCalls).toBeGreaterThan(0);
      expect(stats.meshAllReduces! + stats.meshAllGathers! + stats.meshReduceScatters!).toBeGreaterThan(0);
      // Beyond 2 ranks, mid-size all-reduces (65537 elements: blocks that do not divide evenly) take two rounds.
      if (size > 2) expect(stats.meshTwoRoundAllReduces).toBeGreaterThan(0);
      // Small all-to-alls rode in the round; 2500009-element inputs and every per-pair one went over the connections.
      expect(stats.meshAllToAlls).toBeGreaterThan(0);
      expect(stats.tcpAllToAlls).toBeGreaterThan(0);
      // Broadcast, reduce, gather and scatter: small ones in the round, 2.5 M elements on the connections.
      expect(stats.meshRooted).toBeGreaterThan(0);
      expect(stats.tcpRooted).toBeGreaterThan(0);
    }
  }, 600_000);
});
