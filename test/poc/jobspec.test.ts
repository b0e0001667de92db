// Cluster job specs: the Kubernetes manifests parsed by two independent YAML readers
// (the yaml package and Python's PyYAML) and checked field by field; the Slurm script
// run under stand-in scontrol/srun that print what each node would execute.
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { kubernetesSpec, slurmScript } from '../../src/poc/jobspec.js';
import { isNcclNodeError } from '../../src/errors.js';
import { pythonWith } from '../helpers/python.js';
import { repoRoot } from '../helpers/ranks.js';

type Doc = Record<string, any>;

async function docs(text: string): Promise<Doc[]> {
  const ours = parseAllDocuments(text).map((d) => d.toJS() as Doc);
  const python = await pythonWith(['pyyaml']);
  const theirs = JSON.parse(execFileSync(python, ['-c', 'import sys, json, yaml; json.dump(list(yaml.safe_load_all(sys.stdin)), sys.stdout)'], { input: text }).toString()) as Doc[];
  expect(theirs).toEqual(ours);
  return ours;
}

describe('job specs', () => {
  it('one node: a batch/v1 Job with the GPUs, the token Secret and nccl-node run', async () => {
    const [job] = await docs(kubernetesSpec({ name: 'probe', nodes: 1, gpusPerNode: 4, command: ['train.ts', '--steps', '10'] }));
    expect(job).toMatchObject({ apiVersion: 'batch/v1', kind: 'Job', metadata: { name: 'probe' }, spec: { backoffLimit: 0 } });
    const c = job!.spec.template.spec.containers[0];
    expect(job!.spec.template.spec.restartPolicy).toBe('Never');
    expect(c.resources.limits['nvidia.com/gpu']).toBe(4);
    expect(c.env).toContainEqual({ name: 'NCCL_NODE_TOKEN', valueFrom: { secretKeyRef: { name: 'nccl-node-token', key: 'token' } } });
    expect(c.env).toContainEqual({ name: 'NCCL_DEBUG', value: 'WARN' });
    expect(c.command.slice(0, 2)).toEqual(['bash', '-c']);
    expect(c.command[2]).toBe('exec npx nccl-node run --nnodes 1 --node-rank "0" --master-addr "127.0.0.1" --master-port 29500 --nproc-per-node 4 train.ts --steps 10');
  });

  it('several nodes: a headless Service and an Indexed Job whose pod 0 hosts the store', async () => {
    const [svc, job] = await docs(kubernetesSpec({ name: 'pre', nodes: 16, gpusPerNode: 8, command: ['pre.ts'], port: 29600, ncclDebug: 'INFO' }));
    expect(svc).toMatchObject({ apiVersion: 'v1', kind: 'Service', metadata: { name: 'pre' }, spec: { clusterIP: 'None', selector: { 'nccl-node/job': 'pre' }, publishNotReadyAddresses: true } });
    expect(svc!.spec.ports).toEqual([{ name: 'rendezvous', port: 29600 }]);
    expect(job!.spec).toMatchObject({ completionMode: 'Indexed', completions: 16, parallelism: 16, backoffLimit: 0 });
    expect(job!.spec.template.spec.subdomain).toBe('pre');
    expect(job!.spec.template.metadata.labels['nccl-node/job']).toBe('pre'); // the Service selects the pods
    const c = job!.spec.template.spec.containers[0];
    expect(c.command[2]).toBe('exec npx nccl-node run --nnodes 16 --node-rank "${JOB_COMPLETION_INDEX}" --master-addr "pre-0.pre" --master-port 29600 --nproc-per-node 8 pre.ts');
    expect(c.env).toContainEqual({ name: 'NCCL_DEBUG', value: 'INFO' });
    // The shell, not Kubernetes' $(VAR) substitution, expands the index.
    const rank = execFileSync('bash', ['-c', `JOB_COMPLETION_INDEX=5; echo ${c.command[2].match(/--node-rank ("[^"]+")/)[1]}`]).toString().trim();
    expect(rank).toBe('5');
    const [js] = await docs(kubernetesSpec({ name: 'pre', nodes: 2, gpusPerNode: 8, command: ['pre.ts'], flavor: 'jobset' }));
    expect(js).toMatchObject({ apiVersion: 'jobset.x-k8s.io/v1alpha2', kind: 'JobSet' });
    expect(js!.spec.replicatedJobs[0].template.spec).toMatchObject({ completionMode: 'Indexed', completions: 2, parallelism: 2 });
    expect(js!.spec.replicatedJobs[0].template.spec.template.spec.containers[0].command[2]).toContain('--master-addr "pre-workers-0-0.pre"');
  });

  it('Slurm: every node runs nccl-node run with its node id, the first host as master, one token', () => {
    const dir = mkdtempSync(join(tmpdir(), 'nccl-node-slurm-'));
    const script = join(dir, 'job.sbatch');
    writeFileSync(script, slurmScript({ name: 'pre', nodes: 3, gpusPerNode: 8, partition: 'gpu', command: ['pre.ts', '--note', "it's"] }));
    // Stand-ins: scontrol expands the node list; srun runs the command once per node with SLURM_NODEID set.
    writeFileSync(join(dir, 'scontrol'), '#!/bin/bash\nprintf "gpu-a17\\ngpu-a18\\ngpu-b02\\n"\n');
    writeFileSync(join(dir, 'srun'), '#!/bin/bash\nwhile [[ $1 == --* ]]; do shift; done\nfor n in 0 1 2; do SLURM_NODEID=$n "$@"; done\n');
    writeFileSync(join(dir, 'npx'), '#!/bin/bash\necho "node token=$NCCL_NODE_TOKEN debug=$NCCL_DEBUG: $*"\n');
    for (const f of ['scontrol', 'srun', 'npx']) chmodSync(join(dir, f), 0o755);
    const r = spawnSync('bash', [script], { encoding: 'utf8', env: { ...process.env, PATH: `${dir}:${process.env.PATH}`, SLURM_JOB_NODELIST: 'gpu-a[17-18],gpu-b02', NCCL_NODE_TOKEN: '' } });
    expect(r.status, r.stderr).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines).toHaveLength(3);
    const token = /token=([0-9a-f]{32}) /.exec(lines[0]!)![1];
    lines.forEach((l, n) => expect(l).toBe(`node token=${token} debug=WARN: nccl-node run --nnodes 3 --node-rank ${n} --master-addr gpu-a17 --master-port 29500 --nproc-per-node 8 pre.ts --note it's`));
    const head = slurmScript({ name: 'pre', nodes: 3, gpusPerNode: 8, partition: 'gpu', command: ['pre.ts'] });
    for (const d of ['#SBATCH --nodes=3', '#SBATCH --ntasks-per-node=1', '#SBATCH --gpus-per-node=8', '#SBATCH --partition=gpu', '#SBATCH --time=01:00:00']) expect(head).toContain(d);
  });

  it('bad options are refused; the CLI prints the spec', () => {
    let err: unknown;
    try { kubernetesSpec({ name: 'Bad_Name', nodes: 1, gpusPerNode: 1, command: ['x.ts'] }); } catch (e) { err = e; }
    expect(isNcclNodeError(err, 'ERR_INVALID_ARGUMENT')).toBe(true);
    expect((err as Error).message).toMatch(/job spec: name: a lowercase DNS label/);
    const r = spawnSync(process.execPath, [join(repoRoot, 'bin/nccl-node.js'), 'jobspec', 'slurm', '--name', 'x', '--nodes', '2', '--', 'train.ts', '--lr', '1'], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain('--nproc-per-node 8 train.ts --lr 1');
  });
});
