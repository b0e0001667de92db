/**
 * `nccl-node plan` (analytic capacity plan) and `nccl-node simulate` (seeded failure
 * simulation along a recovery path, optionally a sweep of the checkpoint interval, or
 * of recovery path × spares × interval), over src/plan. Flags map onto
 * the API inputs; --json prints the result object instead of the table.
 */
import { readFileSync } from 'node:fs';
import { Command, Option } from 'commander';
import { isNcclNodeError, NcclNodeError } from '../../errors.js';
import {
  formatPathSweep, formatPlan, formatSimulation, formatSweep, GPU_TYPES, plan, readRecoveryCosts, RECOVERY_PATHS, scaleOf, simulate, sweep, sweepPaths,
  type PlanInput, type RecoveryPath, type SimulateInput,
} from '../../plan/index.js';
import { calibrateCommand, withHardware } from './plan-calibrate.js';
import { readProfile } from '../../plan/profile.js';

type Flags = Record<string, string | boolean | string[] | undefined>;

const num = (v: string | boolean | string[] | undefined): number | undefined => (typeof v === 'string' ? Number(v) : undefined);

/** Drops undefined fields so zod defaults apply and strict objects see only given keys. */
function defined<T extends object>(o: T): T {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
}

function component(spec: string): { name: string; count: number; mtbfHours: number } {
  const m = /^([^:]+):(\d+):([\d.eE+]+)$/.exec(spec);
  if (!m) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `plan: --component: expected name:count:mtbfHours, got ${JSON.stringify(spec)}`);
  return { name: m[1]!, count: Number(m[2]), mtbfHours: Number(m[3]) };
}

function planInput(f: Flags): PlanInput {
  if (typeof f.input === 'string') {
    try {
      return withHardware(JSON.parse(readFileSync(f.input, 'utf8')) as PlanInput, f.hardware);
    } catch (err) {
      if (isNcclNodeError(err)) throw err;
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `plan: --input: expected a readable JSON file, got ${(err as Error).message}`);
    }
  }
  const layout = f.dp === undefined ? undefined : defined({
    dp: num(f.dp)!, tp: num(f.tp), pp: num(f.pp), microBatches: num(f.microBatches), microBatchSize: num(f.microBatchSize),
    schedule: f.schedule as '1f1b' | undefined, virtualStages: num(f.virtualStages),
  });
  const components = Array.isArray(f.component) ? f.component.map(component) : undefined;
  return withHardware(defined({
    model: defined({ params: num(f.params), layers: num(f.layers), hidden: num(f.hidden), heads: num(f.heads), seq: num(f.seq), vocab: num(f.vocab) }),
    tokens: num(f.tokens)!,
    cluster: defined({ gpu: f.gpu as string, count: num(f.gpus)!, nvlinkDomain: num(f.nvlinkDomain) }),
    layout,
    globalBatchTokens: num(f.globalBatchTokens),
    precision: f.precision as 'bf16-mixed' | undefined,
    zeroStage: num(f.zero) as 0 | undefined,
    recompute: f.recompute as 'none' | undefined,
    sequenceParallel: f.sequenceParallel === false ? false : undefined,
    mfu: num(f.mfu), efficiency: num(f.efficiency), storageBandwidth: num(f.storageBw),
    checkpointSeconds: num(f.checkpointSeconds), restartSeconds: num(f.restartSeconds),
    reliability: f.gpuMtbfHours === undefined && !components ? undefined : defined({ gpuMtbfHours: num(f.gpuMtbfHours), components }),
  }), f.hardware);
}

/** --checkpoint-seconds, or --checkpoint-bytes over the --hardware profile's storage bandwidth. */
function stallSeconds(f: Flags): number | undefined {
  if (f.checkpointBytes === undefined) {
    if (typeof f.hardware === 'string') throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'simulate: --hardware: expected --checkpoint-bytes with it (the profile gives the stall of a checkpoint of that size)');
    return num(f.checkpointSeconds);
  }
  if (typeof f.hardware !== 'string' || f.checkpointSeconds !== undefined) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'simulate: --checkpoint-bytes: expected --hardware FILE with it and no --checkpoint-seconds');
  }
  const bytes = num(f.checkpointBytes)!;
  if (!(bytes > 0)) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `simulate: --checkpoint-bytes: expected a positive number, got ${String(f.checkpointBytes)}`);
  return bytes / readProfile(f.hardware).storageBandwidth;
}

function report(name: string, err: unknown): void {
  if (!isNcclNodeError(err)) throw err;
  const code = ` [${err.code}]`;
  process.stderr.write(`nccl-node ${name}${code}: ${(err as Error).message}\n`);
  process.exitCode = 2;
}

const json = (v: unknown) => `${JSON.stringify(v, (_k, x) => (x === Infinity ? null : x), 2)}\n`;

export function registerPlanCommands(program: Command): void {
  const collect = (v: string, prev: string[] = []) => [...prev, v];
  program.command('plan')
    .description('analytic capacity plan: memory per GPU, communication, step time, FLOPs, days to train, checkpoint interval (docs/plan.md)')
    .option('--input <file>', 'a JSON plan input (the API\'s plan() argument) instead of the flags')
    .option('--params <n>', 'parameter count (else 12·L·h² + V·h from the shape)')
    .option('--layers <n>').option('--hidden <n>').option('--heads <n>').option('--seq <n>', 'sequence length').option('--vocab <n>')
    .option('--tokens <n>', 'training tokens (D)')
    .addOption(new Option('--gpu <type>', 'GPU type').choices(GPU_TYPES))
    .option('--gpus <n>', 'GPU count')
    .option('--nvlink-domain <n>', 'GPUs per NVLink domain (default: the GPU type\'s)')
    .option('--dp <n>', 'data-parallel size (fixes the layout; else layouts are searched)')
    .option('--tp <n>').option('--pp <n>').option('--micro-batches <n>').option('--micro-batch-size <n>')
    .addOption(new Option('--schedule <s>').choices(['1f1b', 'gpipe', 'interleaved']))
    .option('--virtual-stages <n>', 'model chunks per stage (interleaved)')
    .option('--global-batch-tokens <n>', 'tokens per step for the layout search')
    .addOption(new Option('--precision <p>').choices(['bf16-mixed', 'fp32']))
    .option('--zero <stage>', 'ZeRO stage 0-3')
    .addOption(new Option('--recompute <r>').choices(['none', 'selective', 'full']))
    .option('--no-sequence-parallel', 'tensor parallelism without sequence parallelism')
    .option('--mfu <f>', 'assume this model FLOPs utilization (0-1)')
    .option('--efficiency <f>', 'matmul fraction of peak for the computed step time (0-1)')
    .option('--storage-bw <bytes/s>', 'aggregate checkpoint write bandwidth')
    .option('--checkpoint-seconds <s>', 'blocking checkpoint cost (default: size / storage bandwidth)')
    .option('--restart-seconds <s>', 'detection + restart after a failure')
    .option('--gpu-mtbf-hours <h>', 'per-GPU MTBF (default from Llama 3: 16384·54·24/419)')
    .option('--component <name:count:mtbfHours>', 'a component class with its MTBF (repeatable; replaces --gpu-mtbf-hours)', collect)
    .option('--hardware <file>', 'a hardware profile (plan --calibrate --out FILE) instead of --gpu; its efficiency and storage bandwidth are the defaults')
    .option('--svg <dir>', 'also write goodput-vs-interval, MFU-vs-dp and memory-per-layout plots as SVG into DIR')
    .option('--calibrate', 'measure this machine (matmul, memory, all-reduce, disk) and predict the example models\' step times (docs/plan.md)')
    .option('--out <file>', 'with --calibrate: save the hardware profile as JSON')
    .option('--calibrate-ms <ms>', 'with --calibrate: milliseconds per timed kernel (default 400)')
    .option('--calibrate-ranks <n>', 'with --calibrate: ranks of the all-reduce sweep (default 2)')
    .option('--calibrate-max-bytes <n>', 'with --calibrate: largest all-reduce (default 4 MiB)')
    .option('--disk-bytes <n>', 'with --calibrate: bytes written for the disk bandwidth (default 64 MiB)')
    .option('--disk-dir <dir>', 'with --calibrate: where to write them (default the OS temp dir)')
    .option('--json', 'print the result as JSON')
    .action(async (f: Flags) => {
      try {
        if (f.calibrate) return await calibrateCommand(f);
        const input = planInput(f);
        const r = plan(input);
        process.stdout.write(f.json ? json(r) : formatPlan(r));
        if (typeof f.svg === 'string') {
          const { planPlots, writePlots } = await import('../../plan/plots.js');
          const files = await writePlots(f.svg, planPlots(input, r));
          if (!f.json) process.stdout.write(`plots: ${files.join(', ')}\n`);
        }
      } catch (err) { report('plan', err); }
    });

  program.command('simulate')
    .description('seeded discrete-event simulation of failures, restarts and checkpoints; --sweep finds the best checkpoint interval')
    .option('--gpus <n>', 'GPUs in the job (default 16384)')
    .option('--hours <h>', 'wall-clock hours simulated (default 54 days)')
    .option('--rate-scale <x>', 'multiply every fault rate (default Llama 3 rates)')
    .option('--checkpoint-interval <s>', 'seconds of work between checkpoints (default Young\'s)')
    .option('--checkpoint-seconds <s>', 'stall per checkpoint')
    .option('--detect-seconds <s>').option('--restart-seconds <s>')
    .option('--replace-seconds <s>', 'node replacement wait after a hardware fault without a hot spare')
    .option('--hot-spares <n>').option('--spare-repair-hours <h>')
    .option('--tokens-per-second <n>', 'training throughput, for goodput')
    .option('--seed <n>')
    .addOption(new Option('--recovery-path <path>', 'how failures are recovered, falling back a rung when the path cannot (default full-restart)').choices(RECOVERY_PATHS))
    .option('--recovery-costs <file>', 'per-rung costs from bench/ft/recovery.ts --json FILE (median per fault x restore path), scaled to this job (docs/plan.md)')
    .option('--step-seconds <s>', 'training step time (what in-process recovery loses)')
    .option('--snapshot-every <steps>', 'in-memory snapshot every N steps (in-memory and in-process paths)')
    .option('--snapshot-seconds <s>', 'training stall per in-memory snapshot')
    .option('--gpus-per-node <n>').option('--shrink-slack <nodes>', 'nodes the job may be short of and keep training (in-process)')
    .option('--state-bytes <n>', 'training state size: transfers to spares, and the restore term of --recovery-costs')
    .option('--storage-bw <bytes/s>', 'aggregate checkpoint read bandwidth (with --state-bytes)')
    .option('--network-bw <bytes/s>', 'per-node network bandwidth (default 50e9)')
    .option('--heartbeat-timeout <s>', 'detection timeout at this scale, for scaling --recovery-costs (default --detect-seconds)')
    .option('--sweep', 'sweep the checkpoint interval over seeds (with --paths or --spares: recovery path x spares x interval)')
    .option('--paths <list>', 'comma-separated recovery paths for the sweep (default all three)')
    .option('--spares <list>', 'comma-separated hot spare counts for the sweep')
    .option('--seeds <n>', 'seeds per interval in a sweep (default 8)')
    .option('--intervals <list>', 'comma-separated intervals in seconds for the sweep')
    .option('--hardware <file>', 'a hardware profile: with --checkpoint-bytes, the stall is bytes / its storage bandwidth')
    .option('--checkpoint-bytes <n>', 'checkpoint size, with --hardware')
    .option('--svg <dir>', 'write a goodput-vs-interval plot (from the sweep; one is run if --sweep is not given) as SVG into DIR')
    .option('--json', 'print the result as JSON')
    .action(async (f: Flags) => {
      try {
        const input: SimulateInput = defined({
          gpus: num(f.gpus), hours: num(f.hours), rateScale: num(f.rateScale), checkpointSeconds: stallSeconds(f),
          detectSeconds: num(f.detectSeconds), restartSeconds: num(f.restartSeconds), replaceSeconds: num(f.replaceSeconds),
          hotSpares: num(f.hotSpares), spareRepairHours: num(f.spareRepairHours), tokensPerSecond: num(f.tokensPerSecond), seed: num(f.seed),
          stepSeconds: num(f.stepSeconds), snapshotEverySteps: num(f.snapshotEvery), snapshotSeconds: num(f.snapshotSeconds),
          gpusPerNode: num(f.gpusPerNode), shrinkSlackNodes: num(f.shrinkSlack), stateBytes: num(f.stateBytes),
          storageBandwidth: num(f.storageBw), networkBandwidth: num(f.networkBw), heartbeatTimeoutSeconds: num(f.heartbeatTimeout),
        });
        const costs = typeof f.recoveryCosts === 'string' ? readRecoveryCosts(f.recoveryCosts, scaleOf(input)) : null;
        if (costs) input.recoveryCosts = costs.costs;
        const from = costs ? { recoveryCostsFrom: { file: f.recoveryCosts, sources: costs.sources } } : {};
        const list = (v: unknown) => (typeof v === 'string' ? v.split(',').map((x) => x.trim()) : undefined);
        const intervals = list(f.intervals)?.map(Number);
        const byPath = Boolean(f.sweep) && (f.paths !== undefined || f.spares !== undefined);
        const recoveryPath = f.recoveryPath as RecoveryPath | undefined;
        const pathSwept = byPath
          ? sweepPaths(defined({ ...input, recoveryPath, seeds: num(f.seeds), intervals, paths: list(f.paths) as RecoveryPath[] | undefined, spares: list(f.spares)?.map(Number) }))
          : null;
        const swept = !byPath && (f.sweep || typeof f.svg === 'string') ? sweep(defined({ ...input, recoveryPath, seeds: num(f.seeds), intervals })) : null;
        if (pathSwept) {
          process.stdout.write(f.json ? json({ ...pathSwept, ...from }) : formatPathSweep(pathSwept));
        } else if (f.sweep) {
          process.stdout.write(f.json ? json({ ...swept, ...from }) : formatSweep(swept!));
        } else {
          const r = simulate(defined({ ...input, recoveryPath, checkpointIntervalSeconds: num(f.checkpointInterval) }));
          process.stdout.write(f.json ? json({ ...r, ...from }) : formatSimulation(r));
        }
        if (costs && !f.json) {
          const lines = Object.entries(costs.sources).map(([rung, c]) => `${rung} <- ${c.software.restore}/${c.software.fault} (${c.software.trials}), ${c.hardware.restore}/${c.hardware.fault} (${c.hardware.trials})`);
          process.stdout.write(`recovery costs from ${String(f.recoveryCosts)} at ${costs.sources['full-restart']?.software.ranks ?? '?'} ranks: ${lines.join('; ')}\n`);
        }
        if (typeof f.svg === 'string') {
          const { pathSweepPlots, sweepPlots, writePlots } = await import('../../plan/plots.js');
          const files = await writePlots(f.svg, pathSwept ? pathSweepPlots(pathSwept, input.tokensPerSecond) : sweepPlots(swept!, input.tokensPerSecond));
          if (!f.json) process.stdout.write(`plots: ${files.join(', ')}\n`);
        }
      } catch (err) { report('simulate', err); }
    });
}
