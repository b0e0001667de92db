/**
 * Cluster job specs that run an nccl-node job (`nccl-node run` on every node) the way
 * it runs here: a Kubernetes Job (one node), an Indexed Job with a headless Service
 * for the rendezvous or a JobSet (several nodes), and a Slurm batch script. Each node
 * starts `nccl-node run --nnodes N --node-rank K --master-addr <node 0>`; the job
 * token comes from a Secret (Kubernetes) or is made once per job (Slurm) and reaches
 * every rank through the environment.
 */
import { stringify as yamlStringify } from 'yaml';
import { z } from 'zod';
import { NcclNodeError } from '../errors.js';

export const jobSpecSchema = z.object({
  /** DNS-1123 label: the Job, Service and pod names derive from it. */
  name: z.string().regex(/^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$/, 'a lowercase DNS label of at most 42 characters'),
  nodes: z.number().int().positive(),
  gpusPerNode: z.number().int().nonnegative(),
  /** The script and its arguments, as `nccl-node run` takes them. */
  command: z.array(z.string()).min(1),
  image: z.string().default('ghcr.io/nccl-node/nccl-node:latest'),
  port: z.number().int().min(1).max(65535).default(29500),
  /** Kubernetes: the Secret holding the job token under key `token`. */
  tokenSecret: z.string().default('nccl-node-token'),
  /** Slurm: wall-clock limit, e.g. 01:00:00. */
  time: z.string().regex(/^(\d+-)?\d{1,2}:\d{2}:\d{2}$/).default('01:00:00'),
  partition: z.string().optional(),
  ncclDebug: z.enum(['VERSION', 'WARN', 'INFO', 'TRACE']).default('WARN'),
  /** Kubernetes multi-node flavour. */
  flavor: z.enum(['indexed-job', 'jobset']).default('indexed-job'),
});
export type JobSpecOptions = z.input<typeof jobSpecSchema>;

function parse(o: JobSpecOptions) {
  const r = jobSpecSchema.safeParse(o);
  if (!r.success) {
    const i = r.error.issues[0]!;
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `job spec: ${i.path.join('.') || 'options'}: ${i.message}`);
  }
  return r.data;
}

// Plain YAML for kubectl and every other reader: no anchors for repeated objects.
const stringify = (v: unknown) => yamlStringify(v, { aliasDuplicateObjects: false });

function quote(s: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/**
 * `nccl-node run` for one node; rank and master are shell expressions evaluated on the
 * node (Kubernetes sets JOB_COMPLETION_INDEX in an Indexed Job's pods; written ${...}
 * so Kubernetes' own $(VAR) substitution leaves it to the shell).
 */
function runLine(o: ReturnType<typeof parse>, nodeRank: string, masterAddr: string): string {
  const perNode = o.gpusPerNode > 0 ? String(o.gpusPerNode) : 'cpu';
  return ['exec npx nccl-node run', `--nnodes ${o.nodes}`, `--node-rank "${nodeRank}"`, `--master-addr "${masterAddr}"`,
    `--master-port ${o.port}`, `--nproc-per-node ${perNode}`, ...o.command.map(quote)].join(' ');
}

function container(o: ReturnType<typeof parse>, nodeRank: string, masterAddr: string) {
  return {
    name: 'trainer',
    image: o.image,
    command: ['bash', '-c', runLine(o, nodeRank, masterAddr)],
    env: [
      { name: 'NCCL_NODE_TOKEN', valueFrom: { secretKeyRef: { name: o.tokenSecret, key: 'token' } } },
      { name: 'NCCL_DEBUG', value: o.ncclDebug },
    ],
    ports: [{ containerPort: o.port, name: 'rendezvous' }],
    resources: o.gpusPerNode > 0 ? { limits: { 'nvidia.com/gpu': o.gpusPerNode } } : {},
  };
}

/** Kubernetes manifests (YAML, documents separated by ---). */
export function kubernetesSpec(options: JobSpecOptions): string {
  const o = parse(options);
  const labels = { 'app.kubernetes.io/name': 'nccl-node', 'nccl-node/job': o.name };
  if (o.nodes === 1) {
    const job = {
      apiVersion: 'batch/v1', kind: 'Job', metadata: { name: o.name, labels },
      spec: { backoffLimit: 0, template: { metadata: { labels }, spec: { restartPolicy: 'Never', containers: [container(o, '0', '127.0.0.1')] } } },
    };
    return stringify(job);
  }
  if (o.flavor === 'jobset') {
    // JobSet names pods <jobset>-<job>-<index>-<completion>-<hash> and gives them DNS
    // names <jobset>-<job>-<index>-<completion>.<jobset>; node 0 is workers-0-0.
    const jobset = {
      apiVersion: 'jobset.x-k8s.io/v1alpha2', kind: 'JobSet', metadata: { name: o.name, labels },
      spec: {
        failurePolicy: { maxRestarts: 0 },
        replicatedJobs: [{
          name: 'workers', replicas: 1,
          template: { spec: {
            parallelism: o.nodes, completions: o.nodes, completionMode: 'Indexed', backoffLimit: 0,
            template: { metadata: { labels }, spec: { restartPolicy: 'Never', containers: [container(o, '${JOB_COMPLETION_INDEX}', `${o.name}-workers-0-0.${o.name}`)] } },
          } },
        }],
      },
    };
    return stringify(jobset);
  }
  // An Indexed Job: pod k's hostname is <job>-<k>, under the headless Service's subdomain.
  const service = {
    apiVersion: 'v1', kind: 'Service', metadata: { name: o.name, labels },
    spec: { clusterIP: 'None', selector: { 'nccl-node/job': o.name }, ports: [{ name: 'rendezvous', port: o.port }], publishNotReadyAddresses: true },
  };
  const job = {
    apiVersion: 'batch/v1', kind: 'Job', metadata: { name: o.name, labels },
    spec: {
      completionMode: 'Indexed', completions: o.nodes, parallelism: o.nodes, backoffLimit: 0,
      template: { metadata: { labels }, spec: { subdomain: o.name, restartPolicy: 'Never', containers: [container(o, '${JOB_COMPLETION_INDEX}', `${o.name}-0.${o.name}`)] } },
    },
  };
  return `${stringify(service)}---\n${stringify(job)}`;
}

/** A Slurm batch script: one task per node, node 0 (the first of the allocation) hosts the store. */
export function slurmScript(options: JobSpecOptions): string {
  const o = parse(options);
  const lines = [
    '#!/bin/bash',
    `#SBATCH --job-name=${o.name}`,
    `#SBATCH --nodes=${o.nodes}`,
    '#SBATCH --ntasks-per-node=1',
    ...(o.gpusPerNode > 0 ? [`#SBATCH --gpus-per-node=${o.gpusPerNode}`] : []),
    `#SBATCH --time=${o.time}`,
    ...(o.partition ? [`#SBATCH --partition=${o.partition}`] : []),
    '#SBATCH --output=%x-%j.out',
    'set -euo pipefail',
    '# Node 0 is the first host of the allocation; the token is made once and exported to every task.',
    // sed reads to the end: with pipefail, head closing the pipe early would fail the job (SIGPIPE).
    'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n 1p)',
    'export MASTER_ADDR',
    'export NCCL_NODE_TOKEN=${NCCL_NODE_TOKEN:-$(od -An -tx1 -N16 /dev/urandom | tr -d \' \\n\')}',
    `export NCCL_DEBUG=${o.ncclDebug}`,
    `srun --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c '${runLine(o, '$SLURM_NODEID', '$MASTER_ADDR').replace(/'/g, `'\\''`)}'`,
    '',
  ];
  return lines.join('\n');
}
