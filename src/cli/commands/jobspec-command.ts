/**
 * `nccl-node jobspec k8s|slurm [options] <script> [args...]`: prints a Kubernetes
 * Job / Indexed Job + headless Service / JobSet, or a Slurm batch script, that runs
 * `nccl-node run <script>` on every node of a cluster (src/poc/jobspec.ts).
 */
import type { Command } from 'commander';
import { kubernetesSpec, slurmScript, type JobSpecOptions } from '../../poc/jobspec.js';

interface Flags {
  name: string; nodes: string; gpusPerNode: string; image?: string; port?: string; tokenSecret?: string;
  time?: string; partition?: string; ncclDebug?: string; flavor?: string;
}

function options(script: string, args: string[], f: Flags): JobSpecOptions {
  return {
    name: f.name, nodes: Number(f.nodes), gpusPerNode: Number(f.gpusPerNode), command: [script, ...args],
    ...(f.image && { image: f.image }), ...(f.port && { port: Number(f.port) }), ...(f.tokenSecret && { tokenSecret: f.tokenSecret }),
    ...(f.time && { time: f.time }), ...(f.partition && { partition: f.partition }),
    ...(f.ncclDebug && { ncclDebug: f.ncclDebug as JobSpecOptions['ncclDebug'] }), ...(f.flavor && { flavor: f.flavor as JobSpecOptions['flavor'] }),
  };
}

export function registerJobspecCommand(program: Command): void {
  // Script arguments that look like options go after --: jobspec k8s --name x -- train.ts --lr 3e-4
  program.command('jobspec <kind> <script> [args...]')
    .description('print a cluster job spec that runs `nccl-node run <script>` on every node: kind k8s (Job, Indexed Job + headless Service, or JobSet) or slurm (sbatch script)')
    .requiredOption('--name <name>', 'job name (a DNS label)')
    .option('--nodes <n>', 'nodes', '1')
    .option('--gpus-per-node <n>', 'GPUs per node (0: CPU ranks, one per core)', '8')
    .option('--image <image>', 'container image (k8s)')
    .option('--port <port>', 'rendezvous port on node 0')
    .option('--token-secret <name>', 'Secret with the job token under key "token" (k8s)')
    .option('--flavor <flavor>', 'k8s multi-node: indexed-job or jobset')
    .option('--time <hh:mm:ss>', 'wall-clock limit (slurm)')
    .option('--partition <name>', 'partition (slurm)')
    .option('--nccl-debug <level>', 'NCCL_DEBUG: VERSION, WARN, INFO or TRACE')
    .action((kind: string, script: string, args: string[], f: Flags) => {
      try {
        if (kind !== 'k8s' && kind !== 'slurm') throw new Error(`unknown kind ${JSON.stringify(kind)}: expected k8s or slurm`);
        const o = options(script, args, f);
        process.stdout.write(kind === 'k8s' ? kubernetesSpec(o) : slurmScript(o));
      } catch (err) {
        process.stderr.write(`nccl-node jobspec: ${(err as Error).message}\n`);
        process.exitCode = 2;
      }
    });
}
