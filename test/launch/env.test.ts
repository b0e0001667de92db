import { describe, expect, it } from 'vitest';
import { isNcclNodeError, type NcclNodeError } from '../../src/errors.js';
import {
  DEFAULT_MASTER_ADDR,
  DEFAULT_MASTER_PORT,
  deriveToken,
  expandSlurmHostlist,
  parseSlurmTasksPerNode,
  resolveJobEnv,
  type Env,
  type JobEnv,
} from '../../src/launch/env.js';

function fails(env: Env, overrides?: Partial<JobEnv>): NcclNodeError {
  try {
    resolveJobEnv(env, overrides);
  } catch (err) {
    if (isNcclNodeError(err, 'ERR_INVALID_ARGUMENT')) return err;
    throw err;
  }
  throw new Error('expected resolveJobEnv to throw');
}

describe('resolveJobEnv', () => {
  it('is rank 0 of 1 with a random token when nothing launched us', () => {
    const a = resolveJobEnv({});
    const b = resolveJobEnv({});
    expect(a).toMatchObject({
      rank: 0, worldSize: 1, localRank: 0, localWorldSize: 1,
      masterAddr: DEFAULT_MASTER_ADDR, masterPort: DEFAULT_MASTER_PORT,
      tokenDerived: false, storeHosted: false, source: 'single',
    });
    expect(a.token).toMatch(/^[0-9a-f]{64}$/);
    expect(a.token).not.toBe(b.token);
  });

  it('reads the nccl-node launcher variables', () => {
    const env = resolveJobEnv({
      NCCL_NODE_LAUNCHER: '1', NCCL_NODE_STORE_HOSTED: '1', NCCL_NODE_TOKEN: 'secret',
      RANK: '5', WORLD_SIZE: '8', LOCAL_RANK: '1', LOCAL_WORLD_SIZE: '4',
      MASTER_ADDR: 'node0', MASTER_PORT: '1234',
    });
    expect(env).toEqual({
      rank: 5, worldSize: 8, localRank: 1, localWorldSize: 4, masterAddr: 'node0', masterPort: 1234,
      token: 'secret', tokenDerived: false, storeHosted: true, source: 'nccl-node',
    });
  });

  it('reads torchrun variables and derives the token from the run id', () => {
    const env = resolveJobEnv({
      RANK: '1', WORLD_SIZE: '2', LOCAL_RANK: '1', LOCAL_WORLD_SIZE: '2', TORCHELASTIC_RUN_ID: 'abc',
    });
    expect(env).toMatchObject({ rank: 1, worldSize: 2, localRank: 1, localWorldSize: 2, source: 'torchrun' });
    expect(env.token).toBe(deriveToken('torchrun', 'abc'));
    expect(env.tokenDerived).toBe(true);
  });

  it('has no token for a multi-rank job with nothing to derive it from', () => {
    const env = resolveJobEnv({ RANK: '0', WORLD_SIZE: '2' });
    expect(env.token).toBeUndefined();
    // Without local variables the ranks are taken to share one node.
    expect(env).toMatchObject({ localRank: 0, localWorldSize: 2 });
  });

  it('prefers NCCL_NODE_TOKEN over a derived one', () => {
    const env = resolveJobEnv({ RANK: '0', WORLD_SIZE: '2', TORCHELASTIC_RUN_ID: 'x', NCCL_NODE_TOKEN: 't' });
    expect(env).toMatchObject({ token: 't', tokenDerived: false });
  });

  it('reads Slurm variables inside a job step', () => {
    const base = {
      SLURM_PROCID: '5', SLURM_NTASKS: '7', SLURM_LOCALID: '1', SLURM_NODEID: '2',
      SLURM_TASKS_PER_NODE: '2(x3),1', SLURM_LAUNCH_NODE_IPADDR: '10.0.0.1',
      SLURM_JOB_NODELIST: 'gpu-a[07-09],gpu-b1', SLURM_JOB_ID: '777', SLURM_STEP_ID: '0',
    };
    const env = resolveJobEnv(base);
    // The store is on the job's first node, not where srun was typed (SLURM_LAUNCH_NODE_IPADDR).
    expect(env).toMatchObject({
      rank: 5, worldSize: 7, localRank: 1, localWorldSize: 2, masterAddr: 'gpu-a07',
      masterPort: DEFAULT_MASTER_PORT, tokenDerived: true, source: 'slurm',
    });
    expect(env.token).toBe(deriveToken('slurm', '777.0'));
    // Another step of the same job is another rendezvous.
    expect(resolveJobEnv({ ...base, SLURM_STEP_ID: '1' }).token).not.toBe(env.token);
    expect(resolveJobEnv({ ...base, MASTER_ADDR: 'head' }).masterAddr).toBe('head');
    // A step's own node list wins over the job's: the step may run on a subset.
    expect(resolveJobEnv({ ...base, SLURM_STEP_NODELIST: 'gpu-a[08-09]' }).masterAddr).toBe('gpu-a08');
    expect(resolveJobEnv({ ...base, SLURM_JOB_NODELIST: undefined }).masterAddr).toBe(DEFAULT_MASTER_ADDR);
    expect(() => resolveJobEnv({ ...base, SLURM_JOB_NODELIST: 'gpu[1-' })).toThrow(/SLURM_JOB_NODELIST: expected a Slurm hostlist/);
  });

  it('expands Slurm hostlists', () => {
    expect(expandSlurmHostlist('node[01-04,07],gpu-a[1-2]')).toEqual(['node01', 'node02', 'node03', 'node04', 'node07', 'gpu-a1', 'gpu-a2']);
    expect(expandSlurmHostlist('head')).toEqual(['head']);
    expect(expandSlurmHostlist('a1,b[9-11]')).toEqual(['a1', 'b9', 'b10', 'b11']);
    expect(expandSlurmHostlist('n[098-101]x')).toEqual(['n098x', 'n099x', 'n100x', 'n101x']);
    expect(expandSlurmHostlist('r[1-2]n[1-2]')).toEqual(['r1n1', 'r1n2', 'r2n1', 'r2n2']);
    for (const bad of ['', 'a[1-', 'a[x]', 'a[3-1]', 'a]', 'a[[1]]']) {
      expect(() => expandSlurmHostlist(bad, 'SLURM_JOB_NODELIST')).toThrow(/SLURM_JOB_NODELIST/);
    }
  });

  it('under torchrun with TORCHELASTIC_USE_AGENT_STORE=True, finds the job store through the agent\'s', () => {
    const torchrun = { RANK: '1', WORLD_SIZE: '2', MASTER_ADDR: 'localhost', MASTER_PORT: '40000', TORCHELASTIC_RUN_ID: 'abc', TORCHELASTIC_RESTART_COUNT: '2' };
    expect(resolveJobEnv({ ...torchrun, TORCHELASTIC_USE_AGENT_STORE: 'True' }).agentStore).toEqual({ runId: 'abc', restartCount: 2 });
    expect(resolveJobEnv({ ...torchrun, TORCHELASTIC_USE_AGENT_STORE: 'False' }).agentStore).toBeUndefined();
    expect(resolveJobEnv(torchrun).agentStore).toBeUndefined();
    // nccl-node run's ranks never use it, nor do explicit store options.
    expect(resolveJobEnv({ ...torchrun, TORCHELASTIC_USE_AGENT_STORE: 'True', NCCL_NODE_LAUNCHER: '1' }).agentStore).toBeUndefined();
    expect(resolveJobEnv({ ...torchrun, TORCHELASTIC_USE_AGENT_STORE: 'True' }, { masterPort: 5 }).agentStore).toBeUndefined();
    expect(() => resolveJobEnv({ ...torchrun, TORCHELASTIC_USE_AGENT_STORE: 'True', TORCHELASTIC_RESTART_COUNT: 'x' })).toThrow(/TORCHELASTIC_RESTART_COUNT/);
  });

  it('falls back to SLURM_NTASKS_PER_NODE', () => {
    const env = resolveJobEnv({
      SLURM_PROCID: '3', SLURM_NTASKS: '4', SLURM_LOCALID: '1', SLURM_NTASKS_PER_NODE: '2',
      SLURM_JOB_ID: '1', SLURM_STEP_ID: '0',
    });
    expect(env).toMatchObject({ rank: 3, localRank: 1, localWorldSize: 2 });
  });

  it('treats an sbatch script (no step id) as a single process', () => {
    expect(resolveJobEnv({ SLURM_PROCID: '0', SLURM_NTASKS: '8', SLURM_JOB_ID: '1' }).source).toBe('single');
  });

  it('reads Open MPI variables', () => {
    const env = resolveJobEnv({
      OMPI_COMM_WORLD_RANK: '2', OMPI_COMM_WORLD_SIZE: '4',
      OMPI_COMM_WORLD_LOCAL_RANK: '0', OMPI_COMM_WORLD_LOCAL_SIZE: '2', PMIX_NAMESPACE: 'prterun-x-1@1',
    });
    expect(env).toMatchObject({ rank: 2, worldSize: 4, localRank: 0, localWorldSize: 2, source: 'ompi', tokenDerived: true });
    expect(env.token).toBe(deriveToken('ompi', 'prterun-x-1@1'));
  });

  it('lets options override the environment', () => {
    const env = resolveJobEnv({ MASTER_ADDR: 'h' }, { rank: 1, worldSize: 3, token: 'tok', masterPort: 4000 });
    expect(env).toMatchObject({
      rank: 1, worldSize: 3, localRank: 1, localWorldSize: 3, masterAddr: 'h', masterPort: 4000,
      token: 'tok', tokenDerived: false, source: 'options',
    });
    // A random token cannot be shared, so a multi-rank job from options needs one given.
    expect(resolveJobEnv({}, { rank: 0, worldSize: 2 }).token).toBeUndefined();
  });

  it('names the variable, what was expected and what came', () => {
    const e = fails({ RANK: '4', WORLD_SIZE: '4' });
    expect(e.message).toBe('RANK: expected an integer in [0, 3] (WORLD_SIZE is 4), got "4"');
    expect(e.details).toMatchObject({ variable: 'RANK', received: '4' });

    expect(fails({ RANK: '1.5', WORLD_SIZE: '4' }).details['variable']).toBe('RANK');
    expect(fails({ RANK: '0', WORLD_SIZE: 'four' }).message).toMatch(/^WORLD_SIZE: expected an integer >= 1, got "four"/);
    expect(fails({ RANK: '0', WORLD_SIZE: '0' }).details['variable']).toBe('WORLD_SIZE');
    expect(fails({ RANK: '-1', WORLD_SIZE: '2' }).details['variable']).toBe('RANK');
    expect(fails({ MASTER_PORT: '70000' }).message).toBe('MASTER_PORT: expected a TCP port in [1, 65535], got "70000"');
    expect(fails({ MASTER_PORT: '0' }).details['variable']).toBe('MASTER_PORT');
    expect(fails({ WORLD_SIZE: '2' }).message).toMatch(/^RANK: expected to be set/);
    expect(fails({ RANK: '0', WORLD_SIZE: '2', LOCAL_RANK: '2', LOCAL_WORLD_SIZE: '2' }).details['variable']).toBe('LOCAL_RANK');
    expect(fails({ RANK: '0', WORLD_SIZE: '2', LOCAL_WORLD_SIZE: '3' }).details['variable']).toBe('LOCAL_WORLD_SIZE');
    expect(fails({ NCCL_NODE_TOKEN: '' }).details['variable']).toBe('NCCL_NODE_TOKEN');
    expect(fails({ NCCL_NODE_STORE_HOSTED: 'yes' }).details['variable']).toBe('NCCL_NODE_STORE_HOSTED');
    expect(fails({}, { rank: 2, worldSize: 2 }).details['variable']).toBe('options.rank');
    expect(fails({}, { masterPort: 0 }).details['variable']).toBe('options.masterPort');
    expect(fails({
      SLURM_PROCID: '0', SLURM_NTASKS: '3', SLURM_TASKS_PER_NODE: '2,1', SLURM_STEP_ID: '0',
    }).details['variable']).toBe('SLURM_NODEID');
  });
});

describe('parseSlurmTasksPerNode', () => {
  it('expands repeat counts', () => {
    expect(parseSlurmTasksPerNode('4')).toEqual([4]);
    expect(parseSlurmTasksPerNode('2(x3),1')).toEqual([2, 2, 2, 1]);
    expect(parseSlurmTasksPerNode('1,3(x2)')).toEqual([1, 3, 3]);
  });

  it('rejects anything else', () => {
    for (const bad of ['', 'x', '2(3)', '2(x0)', '0']) {
      expect(() => parseSlurmTasksPerNode(bad)).toThrow(/SLURM_TASKS_PER_NODE: expected/);
    }
  });
});
