/**
 * `nccl-node run` follows torchrun's conventions: its flags (with underscore spellings),
 * --nproc-per-node gpu|cpu|auto, unprefixed output, --log-dir with --redirects/--tee and
 * the same log layout, --local-ranks-filter, torchrun's environment variables, and a free
 * store port on one node so that two jobs on one host do not clash.
 */
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, runCli } from '../helpers/cli.js';

const ENV_JOB = 'test/launch/fixtures/env.mjs';
const JOB = 'test/launch/fixtures/job.mts';
const STANDINS = path.join(ROOT, 'build', 'standins');

interface Done {
  code: number | null;
  out: string;
  err: string;
  envs: Array<Record<string, string>>;
}

async function cli(args: string[], env: NodeJS.ProcessEnv = {}): Promise<Done> {
  const r = await runCli(['run', ...args], env);
  return { ...r, envs: envsOf(r.out) };
}

function envsOf(text: string): Array<Record<string, string>> {
  return text.split('\n').filter((l) => l.includes('@@')).map((l) => (JSON.parse(l.slice(l.indexOf('@@') + 2)) as { env: Record<string, string> }).env);
}

describe('nccl-node run, torchrun conventions', { timeout: 60_000 }, () => {
  it('prints rank output unprefixed by default, prefixed with --prefix', async () => {
    const plain = await cli(['--nproc-per-node', '2', ENV_JOB]);
    expect(plain.code).toBe(0);
    expect(plain.out.split('\n').filter(Boolean).every((l) => l.startsWith('@@'))).toBe(true);
    expect(plain.err.split('\n').filter(Boolean).sort()).toEqual(['stderr of rank 0', 'stderr of rank 1']);
    const prefixed = await cli(['--prefix', '--nproc-per-node', '2', ENV_JOB]);
    expect(prefixed.out.split('\n').filter(Boolean).map((l) => l.slice(0, 6)).sort()).toEqual(['[0] @@', '[1] @@']);
    expect(prefixed.err.split('\n').filter(Boolean).sort()).toEqual(['[0] stderr of rank 0', '[1] stderr of rank 1']);
  });

  it('accepts torchrun\'s underscore spellings and gives the ranks torchrun\'s variables', async () => {
    const run = await cli(['--nproc_per_node', '2', '--master_addr', '127.0.0.1', '--master_port=0', '--rdzv_id', 'run-7', '--node_rank', '0', ENV_JOB, '--not_ours']);
    expect(run.code).toBe(0);
    const byRank = run.envs.sort((a, b) => Number(a.RANK) - Number(b.RANK));
    expect(byRank.map((e) => [e.RANK, e.LOCAL_RANK, e.ROLE_RANK])).toEqual([['0', '0', '0'], ['1', '1', '1']]);
    for (const e of byRank) {
      expect(e).toMatchObject({
        WORLD_SIZE: '2', LOCAL_WORLD_SIZE: '2', GROUP_RANK: '0', GROUP_WORLD_SIZE: '1', ROLE_NAME: 'default', ROLE_WORLD_SIZE: '2',
        TORCHELASTIC_RUN_ID: 'run-7', TORCHELASTIC_RESTART_COUNT: '0', TORCHELASTIC_MAX_RESTARTS: '0', MASTER_ADDR: '127.0.0.1',
      });
      expect(Number(e.MASTER_PORT)).toBeGreaterThan(0);
    }
  });

  it('--nproc-per-node cpu, gpu and auto count as torchrun does', async () => {
    const gpus = { NCCL_NODE_LIBCUDA: path.join(STANDINS, 'libcuda.so.1'), CUDA_STANDIN_DEVICES: '3' };
    const [cpu, gpu, autoGpu, autoCpu, none] = await Promise.all([
      cli(['--nproc-per-node', 'cpu', ENV_JOB]),
      cli(['--nproc-per-node', 'gpu', ENV_JOB], gpus),
      cli(['--nproc-per-node', 'auto', ENV_JOB], gpus),
      cli(['--nproc-per-node', 'auto', ENV_JOB], { NCCL_NODE_LIBCUDA: '/nonexistent/libcuda.so.1' }),
      cli(['--nproc-per-node', 'gpu', ENV_JOB], { NCCL_NODE_LIBCUDA: '/nonexistent/libcuda.so.1' }),
    ]);
    expect(cpu.envs).toHaveLength(os.availableParallelism());
    expect(gpu.envs).toHaveLength(3);
    expect(autoGpu.envs).toHaveLength(3);
    expect(autoCpu.envs).toHaveLength(os.availableParallelism());
    expect(none.code).toBe(2);
    expect(none.err).toContain('--nproc-per-node gpu: no GPU is visible here');
  });

  it('--log-dir with --redirects writes torchrun\'s layout; --local-ranks-filter picks the console\'s ranks', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'nccl-node-logs-'));
    const run = await cli(['--nproc-per-node', '3', '--rdzv-id', 'job1', '--log-dir', dir, '--redirects', '0:3,1:1', '--local-ranks-filter', '0,1', ENV_JOB]);
    expect(run.code).toBe(0);
    // Rank 0: both streams to files only; rank 1: stdout to its file, stderr to the console; rank 2: filtered out.
    expect(run.out).toBe('');
    expect(run.err).toBe('stderr of rank 1\n');
    const runs = readdirSync(dir);
    expect(runs).toHaveLength(1);
    expect(runs[0]).toMatch(/^job1_\w+$/);
    const attempt = path.join(dir, runs[0]!, 'attempt_0');
    expect(readdirSync(attempt).sort()).toEqual(['0', '1']);
    expect(readdirSync(path.join(attempt, '0')).sort()).toEqual(['stderr.log', 'stdout.log']);
    expect(readdirSync(path.join(attempt, '1'))).toEqual(['stdout.log']);
    expect(readFileSync(path.join(attempt, '0', 'stderr.log'), 'utf8')).toBe('stderr of rank 0\n');
    expect(envsOf(readFileSync(path.join(attempt, '0', 'stdout.log'), 'utf8'))[0]?.RANK).toBe('0');
    expect(envsOf(readFileSync(path.join(attempt, '1', 'stdout.log'), 'utf8'))[0]?.RANK).toBe('1');

    const tee = await cli(['--nproc-per-node', '2', '--log-dir', dir, '--tee', '1', '--local-ranks-filter', '1', ENV_JOB]);
    expect(tee.code).toBe(0);
    expect(tee.envs.map((e) => e.RANK)).toEqual(['1']);
    expect(tee.err).toBe('stderr of rank 1\n');
    const teeRun = readdirSync(dir).find((d) => d !== runs[0])!;
    expect(envsOf(readFileSync(path.join(dir, teeRun, 'attempt_0', '0', 'stdout.log'), 'utf8'))[0]?.RANK).toBe('0');
  });

  it('two one-node jobs without --master-port run at once, even with port 29500 taken', async () => {
    const holder = net.createServer();
    await new Promise<void>((resolve) => {
      holder.once('error', () => resolve()); // someone else holds it: just as good
      holder.listen(29500, '127.0.0.1', () => resolve());
    });
    try {
      const runs = await Promise.all([cli(['--nproc-per-node', '2', JOB, 'allreduce', '1,1000']), cli(['--nproc-per-node', '2', JOB, 'allreduce', '1,1000'])]);
      for (const run of runs) {
        expect({ code: run.code, err: run.err }).toEqual({ code: 0, err: '' });
        const ports = run.out.split('\n').filter((l) => l.startsWith('@@')).map((l) => (JSON.parse(l.slice(2)) as { masterPort: string; wrong: number }));
        expect(ports.map((p) => p.wrong)).toEqual([0, 0]);
        expect(ports[0]!.masterPort).not.toBe('29500');
      }
    } finally {
      holder.close();
    }
  });
});
