/**
 * `nccl-node poc --out DIR`: runs the POC playbook (src/poc/poc.ts) and writes
 * DIR/report.{json,md,html}. Exit 0 when every gate that ran passed, 1 otherwise.
 *
 *   nccl-node poc stage <name> --out DIR     one stage as the rank program of another
 *                                            launcher (torchrun, srun, mpirun, nccl-node run)
 *   nccl-node poc finish --out DIR           inference, canary and the report, after the stages
 *   nccl-node poc --emit k8s|slurm --out DIR job specs running the stages on a cluster
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { InvalidArgumentError, Option, type Command } from 'commander';
import { kubernetesSpec, slurmScript } from '../../poc/jobspec.js';
import { readPocConfig, type PocConfig } from '../../poc/config.js';
import { paths } from '../../poc/corpus.js';
import { assemble, finishStages, gateTable, runPoc } from '../../poc/poc.js';
import { Budget } from '../../poc/budget.js';
import { GANG_STAGES, runStage } from '../../poc/run-stage.js';
import { STAGES, type StageName, type StageResult } from '../../poc/stage.js';
import { join } from 'node:path';

interface Flags {
  out: string; config?: string; small?: boolean; nprocPerNode: number; backend: 'gloo' | 'nccl';
  budgetCoreHours?: number; price?: number; emit?: 'k8s' | 'slurm'; nodes: number; gpusPerNode?: number; stages?: StageName[];
}

function positive(v: string): number {
  const n = Number(v);
  if (!(n > 0) || !Number.isFinite(n)) throw new InvalidArgumentError('expected a positive number');
  return n;
}
function stageList(v: string): StageName[] {
  const names = v.split(',').map((s) => s.trim()).filter(Boolean);
  const bad = names.filter((n) => !(STAGES as readonly string[]).includes(n));
  if (bad.length || !names.length) throw new InvalidArgumentError(`expected a comma-separated list of ${STAGES.join(', ')}; received ${v}`);
  return names as StageName[];
}
function nonNegative(v: string): number {
  const n = Number(v);
  if (!(n >= 0) || !Number.isFinite(n)) throw new InvalidArgumentError('expected a number >= 0');
  return n;
}
function positiveInt(v: string): number {
  const n = positive(v);
  if (!Number.isInteger(n)) throw new InvalidArgumentError('expected a positive integer');
  return n;
}

/** The environment variables a launcher sets in each rank it starts. */
const LAUNCHED = ['RANK', 'SLURM_PROCID', 'OMPI_COMM_WORLD_RANK', 'PMI_RANK'];

async function config(f: Pick<Flags, 'config' | 'small' | 'budgetCoreHours' | 'price'>): Promise<PocConfig> {
  const cfg = await readPocConfig(f.config, { small: f.small });
  if (f.budgetCoreHours !== undefined) cfg.budget.coreHours = f.budgetCoreHours;
  if (f.price !== undefined) cfg.budget.price = f.price;
  return cfg;
}

const say = (l: string) => process.stdout.write(`${l}\n`);

function printReport(r: { verdict: string; files: { md: string; html: string; json: string } }, results: StageResult[]): void {
  say('');
  for (const l of gateTable(results.flatMap((s) => s.gates))) say(l);
  say('');
  say(`Verdict: ${r.verdict.toUpperCase()}`);
  say(`Report: ${r.files.html} (also ${r.files.json}, ${r.files.md})`);
}

async function emit(kind: 'k8s' | 'slurm', f: Flags): Promise<void> {
  await mkdir(f.out, { recursive: true });
  const common = ['--out', f.out, ...(f.config ? ['--config', f.config] : []), ...(f.small ? ['--small'] : []), '--backend', f.backend];
  const cli = 'node_modules/nccl-node/bin/nccl-node.js';
  for (const stage of GANG_STAGES) {
    const o = { name: `nccl-node-poc-${stage}`, nodes: f.nodes, gpusPerNode: f.gpusPerNode ?? (f.backend === 'nccl' ? 8 : 0), command: [cli, 'poc', 'stage', stage, ...common] };
    const file = join(f.out, `jobspec-${stage}.${kind === 'k8s' ? 'yaml' : 'sbatch'}`);
    await writeFile(file, kind === 'k8s' ? kubernetesSpec(o) : slurmScript(o));
    say(file);
  }
  say(`then, in one process with DIR on shared storage: npx nccl-node poc finish ${common.slice(0, -2).join(' ')}`);
}

export function registerPocCommand(program: Command): void {
  const poc = program.command('poc')
    .description('run the POC playbook (connectivity, pretrain, checkpoint restore, finetune, inference, canary, budget) and write a report with pass/fail gates')
    .option('--out <dir>', 'directory for the stages\' data, checkpoints and the report', 'poc-out')
    .option('--config <file>', 'poc.json: any subset of the knobs (docs/poc.md)')
    .option('--small', 'a schedule of minutes on two cores (the demo and tests)')
    .addOption(new Option('--nproc-per-node <n>', 'ranks per gang').argParser(positiveInt).default(2))
    .addOption(new Option('--backend <name>', 'communication backend').choices(['gloo', 'nccl']).default('gloo'))
    .addOption(new Option('--budget-core-hours <h>', 'stop once wall x ranks crosses this (GPU-hours on nccl)').argParser(positive))
    .addOption(new Option('--price <p>', 'price per core-hour (GPU-hour) for the cost line').argParser(nonNegative))
    .addOption(new Option('--stages <list>', 'run only these stages, e.g. connectivity,pretrain (the others are reported as skipped)').argParser(stageList))
    .addOption(new Option('--emit <kind>', 'write job specs for the stages instead of running them').choices(['k8s', 'slurm']))
    .addOption(new Option('--nodes <n>', 'nodes (with --emit)').argParser(positiveInt).default(1))
    .addOption(new Option('--gpus-per-node <n>', 'GPUs per node (with --emit; 0: CPU ranks)').argParser(nonNegative))
    .action(async (f: Flags) => {
      const inside = LAUNCHED.find((k) => process.env[k] !== undefined);
      if (inside && !f.emit) {
        process.stderr.write(`nccl-node poc: this process is already a rank of a launched job (${inside} is set). The one-command POC starts its own gangs;\n` +
          `under this launcher run each stage as the rank program, in order: nccl-node poc stage <${GANG_STAGES.join('|')}> --out DIR [same flags],\n` +
          'then nccl-node poc finish --out DIR [same flags] in one process (docs/poc.md).\n');
        process.exitCode = 2;
        return;
      }
      const cfg = await config(f);
      if (f.emit) return emit(f.emit, f);
      const { report, results } = await runPoc({ out: f.out, cfg, nprocPerNode: f.nprocPerNode, backend: f.backend, ...(f.stages ? { only: f.stages } : {}) });
      printReport(report, results);
      process.exitCode = report.verdict === 'fail' ? 1 : 0;
    });

  poc.command('stage <name>')
    .description(`run one gang stage (${GANG_STAGES.join(', ')}) as a rank of the job in the environment; rank 0 writes DIR/stage-<name>.json`)
    .requiredOption('--out <dir>', 'the POC directory (shared by every node)')
    .option('--config <file>', 'poc.json')
    .option('--small', 'the small schedule')
    .addOption(new Option('--backend <name>', 'communication backend').choices(['auto', 'gloo', 'nccl']).default('auto'))
    .action(async (name: string, f: Flags) => {
      await runStage(name, { out: f.out, cfg: await config(f), backend: f.backend });
    });

  poc.command('finish')
    .description('after the stages ran under another launcher: inference, canary, budget and the report, in this process')
    .requiredOption('--out <dir>', 'the POC directory')
    .option('--config <file>', 'poc.json')
    .option('--small', 'the small schedule')
    .addOption(new Option('--budget-core-hours <h>', 'budget in core-hours (GPU-hours on nccl)').argParser(positive))
    .addOption(new Option('--price <p>', 'price per core-hour').argParser(nonNegative))
    .action(async (f: Flags) => {
      const cfg = await config(f);
      const results: StageResult[] = [];
      let backend = 'gloo', ranks = 1;
      for (const s of GANG_STAGES) {
        try {
          const r = JSON.parse(await readFile(paths(f.out).stage(s), 'utf8')) as StageResult & { worldSize: number; backend: string };
          results.push(r);
          [backend, ranks] = [r.backend, r.worldSize];
        } catch {
          /* not run */
        }
      }
      const budget = new Budget(cfg.budget.coreHours, cfg.budget.price, backend === 'nccl' ? 'GPU-hours' : 'core-hours');
      for (const r of results) budget.add(r.stage, r.seconds, ranks);
      const all = await finishStages(f.out, cfg, results, budget);
      const report = await assemble(f.out, cfg, all, { startedAt: new Date().toISOString(), nprocPerNode: ranks, backend });
      printReport(report, all);
      process.exitCode = report.verdict === 'fail' ? 1 : 0;
    });
}
