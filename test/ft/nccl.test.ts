/**
 * The elastic group on NCCL (the stand-in libraries): 3 ranks, rank 2 dies; the
 * survivors' NCCL all-reduce fails, they agree on the membership through the store and
 * continue on a 2-rank NCCL communicator: shrunk from the broken one with ncclCommShrink
 * (NCCL_SHRINK_ABORT), or, with a library older than 2.27 (NCCL_STANDIN_VERSION), made
 * afresh with ncclCommInitRank. The sums before (1+2+3) and after (1+2) are the
 * computed expectations, the same on both paths.
 */
import { describe, expect, it } from 'vitest';
import { runRanks, describeRanks } from '../helpers/ranks.js';
import { standinEnv } from '../gpu/helpers.js';

describe('elastic group on NCCL', () => {
  for (const [via, env] of [['ncclCommShrink', {}], ['init', { NCCL_STANDIN_VERSION: '22605' }]] as const) {
    it(`3 ranks on the NCCL stand-ins, rank 2 dies: the survivors continue on a 2-rank NCCL communicator (via ${via})`, async () => {
      const rs = await runRanks('test/ft/nccl-worker.ts', 3, { env: standinEnv(env), timeoutMs: 40_000 });
      const why = describeRanks(rs);
      expect(rs[2]!.signal, why).toBe('SIGKILL');
      for (const r of rs.slice(0, 2)) {
        expect(r.code, why).toBe(0);
        expect(r.reports[0]).toEqual({ backend: 'nccl' });
        const steps = r.reports.filter((x) => x.step !== undefined);
        expect(steps.map((x) => [x.step, x.size, x.gen, x.sum])).toEqual([[0, 3, 0, 6], [1, 3, 0, 6], [2, 2, 1, 3], [3, 2, 1, 3], [4, 2, 1, 3]]);
        const fault = r.reports.find((x) => x.fault)!;
        expect(['ERR_NCCL', 'ERR_PEER_LOST', 'ERR_COMM_ABORTED']).toContain(fault.fault);
        expect(fault.action).toBe('reform');
        const round = r.reports.find((x) => x.round)!;
        expect(round.round).toBe('shrink');
        expect(round.via).toBe(via);
        // The fault broke the communicator: the shrink terminates its work first.
        expect(round.abort).toBe(via === 'ncclCommShrink' ? true : null);
        console.log(`rank ${r.rank}: ${fault.fault} -> shrink via ${via} in ${(round.ms as number).toFixed(0)} ms ` +
          `(round ${(round.roundMs as number).toFixed(0)} ms, communicator ${(round.commMs as number).toFixed(1)} ms)`);
      }
    }, 60_000);
  }
});
