/**
 * `nccl-node run`: the gang launcher's command line (the work is in src/launch/launcher.ts).
 */
import os from 'node:os';
import { InvalidArgumentError, Option, type Command } from 'commander';

import { isNcclNodeError } from '../../errors.js';
import { gpuInfo } from '../../gpu/info.js';
import { CPU_BIND_MODES, type CpuBindMode } from '../../launch/cpu-bind.js';
import { NUMA_BINDING_MODES, type NumaBindingMode } from '../../launch/numa-binding.js';
import { DEFAULT_MASTER_ADDR, DEFAULT_MASTER_PORT } from '../../launch/env.js';
import { Launcher } from '../../launch/launcher.js';
import { parseRanksFilter, parseStdMask } from '../../launch/output.js';

const USAGE_EXIT_CODE = 2;

interface RunFlags {
  nprocPerNode: number | 'auto' | 'gpu' | 'cpu';
  nnodes: Nodes;
  nodeRank?: number;
  maxRestarts: number;
  restartScope: 'gang' | 'rank';
  spares: number;
  rdzvBackend: 'static' | 'c10d' | 'etcd';
  rdzvLeaseTtl: number;
  rdzvEndpoint?: { host: string; port: number };
  rdzvLastCall: number;
  masterAddr: string;
  masterPort?: number;
  standalone?: boolean;
  rdzvId?: string;
  logDir?: string;
  redirects?: string;
  tee?: string;
  localRanksFilter?: string;
  joinTimeout: number;
  gracePeriod: number;
  heartbeatInterval: number;
  heartbeatTimeout?: number;
  healthCheck?: boolean;
  cpuBind: CpuBindMode;
  numaBinding?: NumaBindingMode;
  prefix?: boolean;
}

/** torchrun's flags that also have an underscore spelling (--nproc_per_node); ours accept both. */
const UNDERSCORE_FLAGS = ['nproc-per-node', 'numa-binding', 'node-rank', 'master-addr', 'master-port', 'log-dir', 'local-ranks-filter', 'rdzv-id',
  'max-restarts', 'rdzv-backend', 'rdzv-endpoint', 'rdzv-last-call', 'rdzv-lease-ttl'];

/** --nnodes: N, or MIN:MAX for an elastic job. */
interface Nodes {
  min: number;
  max: number;
  elastic: boolean;
}

function nodesArg(value: string): Nodes {
  const m = /^\s*(\d+)\s*(?::\s*(\d+)\s*)?$/.exec(value);
  const min = m ? Number(m[1]) : NaN;
  const max = m?.[2] !== undefined ? Number(m[2]) : min;
  if (!Number.isSafeInteger(min) || !Number.isSafeInteger(max) || min < 1 || max < min) {
    throw new InvalidArgumentError('expected N or MIN:MAX with 1 <= MIN <= MAX, e.g. 2 or 1:4');
  }
  return { min, max, elastic: m?.[2] !== undefined };
}

function endpointArg(value: string): { host: string; port: number } {
  const m = /^\s*(\[[^\]]+\]|[^:\s]+)(?::(\d+))?\s*$/.exec(value);
  const port = m?.[2] !== undefined ? Number(m[2]) : DEFAULT_MASTER_PORT;
  if (m === null || port < 1 || port > 65535) throw new InvalidArgumentError('expected HOST or HOST:PORT, e.g. 10.0.0.1:29400');
  return { host: m[1]!.replace(/^\[|\]$/g, ''), port };
}

/** A commander parser for one of `modes`; the error lists them and says what they choose. */
function oneOf<T extends string>(modes: readonly T[], separator: string, what: string): (value: string) => T {
  return (value) => {
    const v = value.trim();
    if (!(modes as readonly string[]).includes(v)) throw new InvalidArgumentError(`expected ${modes.join(separator)} (${what})`);
    return v as T;
  };
}

const cpuBindArg = oneOf<CpuBindMode>(CPU_BIND_MODES, ' or ', "each local rank on its own share of this node's CPUs");
const numaBindingArg = oneOf<NumaBindingMode>(NUMA_BINDING_MODES, ', ', 'local rank i on CPUs of the NUMA node of GPU i');

function backendArg(value: string): 'static' | 'c10d' | 'etcd' {
  const v = value.trim();
  if (v !== 'static' && v !== 'c10d' && v !== 'etcd') {
    throw new InvalidArgumentError('expected static or c10d (the store a launcher hosts stands in for both), or etcd (an etcd server at --rdzv-endpoint)');
  }
  return v;
}

/**
 * Rewrites the underscore spellings among the launcher's own arguments (those before
 * the script; what follows belongs to the script) to the dashed ones.
 */
export function normalizeRunArgs(args: readonly string[], takesValue: (flag: string) => boolean): string[] {
  const out = [...args];
  for (let i = 0; i < out.length; i++) {
    const arg = out[i]!;
    if (arg === '--' || !arg.startsWith('-')) break;
    const eq = arg.indexOf('=');
    let name = eq === -1 ? arg : arg.slice(0, eq);
    if (name.startsWith('--') && UNDERSCORE_FLAGS.includes(name.slice(2).replaceAll('_', '-'))) {
      name = `--${name.slice(2).replaceAll('_', '-')}`;
      out[i] = eq === -1 ? name : `${name}${arg.slice(eq)}`;
    }
    if (eq === -1 && takesValue(name)) i++;
  }
  return out;
}

function nproc(value: string): number | 'auto' | 'gpu' | 'cpu' {
  const v = value.trim();
  if (v === 'auto' || v === 'gpu' || v === 'cpu') return v;
  return integer(1, 4096)(v);
}

/** torchrun's meaning: gpu = visible GPUs (error if none), cpu = usable cores, auto = GPUs if any, else cores. */
function resolveNproc(n: RunFlags['nprocPerNode']): number {
  if (typeof n === 'number') return n;
  if (n === 'cpu') return os.availableParallelism();
  const gpus = gpuInfo().devices;
  if (n === 'gpu' && gpus === 0) {
    return usageError('--nproc-per-node gpu: no GPU is visible here (CUDA reports 0 devices); use a number, cpu or auto');
  }
  return gpus > 0 ? gpus : os.availableParallelism();
}

function integer(min: number, max = Number.MAX_SAFE_INTEGER) {
  return (value: string): number => {
    const n = /^\d+$/.test(value.trim()) ? Number(value) : NaN;
    if (!Number.isSafeInteger(n) || n < min || n > max) {
      throw new InvalidArgumentError(max === Number.MAX_SAFE_INTEGER ? `expected an integer >= ${min}` : `expected an integer in [${min}, ${max}]`);
    }
    return n;
  };
}

function secondsArg(min: number) {
  return (value: string): number => {
    const n = /^\d+(\.\d+)?$/.test(value.trim()) ? Number(value) : NaN;
    if (!Number.isFinite(n) || n < min) throw new InvalidArgumentError(`expected a number of seconds${min > 0 ? ' > 0' : ' >= 0'}`);
    if (min > 0 && n === 0) throw new InvalidArgumentError('expected a number of seconds > 0');
    return n;
  };
}

const HELP_AFTER = `
Every rank gets torchrun's variables: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
GROUP_RANK (node rank), GROUP_WORLD_SIZE, ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE,
TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, MASTER_ADDR,
MASTER_PORT; and NCCL_NODE_TOKEN, NCCL_NODE_STORE_HOSTED=1 and NCCL_NODE_LAUNCHER=1.
Node 0's launcher hosts the job's store on --master-addr:--master-port; on one node the
port defaults to a free one (as torchrun --standalone), on several to ${DEFAULT_MASTER_PORT}.
Flags torchrun spells with underscores (--nproc_per_node, --master_port, ...) work too.

Output: as torchrun, unprefixed (--prefix adds "[rank] "). --log-dir with --redirects
(files only) or --tee (files and console) writes <log-dir>/<run-id>_<random>/attempt_0/
<local rank>/stdout.log and stderr.log; 0 none, 1 stdout, 2 stderr, 3 both, or per local
rank like 0:3,1:1. --local-ranks-filter 0 shows only local rank 0 on the console.

Several nodes: run the same command on every node with its own --node-rank, and export
the same secret NCCL_NODE_TOKEN on all of them first (e.g. \`export NCCL_NODE_TOKEN=$(openssl rand -hex 32)\`).
On one node the launcher makes a token itself.

Gang semantics: every rank must call init() within --join-timeout (a rank that exits 0
before joining is fine). When a rank fails, every rank on every node is stopped (SIGTERM,
SIGKILL after --grace-period) and the launcher exits with the failing rank's exit code
(128 + signal number for a signal); its last line on stderr says which rank failed and how.
With --max-restarts N the whole gang is re-run instead, up to N times, after a new
rendezvous; TORCHELASTIC_RESTART_COUNT says which attempt runs (0, 1, ...), log files go
to attempt_<k>/, and the exit code after the last failed attempt names its first failure.
With --restart-scope rank only the failed rank is restarted (same RANK, with
NCCL_NODE_FT_REJOIN=1 and NCCL_NODE_RANK_RESTART_COUNT), the others keep running and
re-form their group in-process (ElasticGroup, docs/fault-tolerance.md); each restart
counts against --max-restarts; exit code 75, a lost node or store still stop the gang.
--spares N (with --restart-scope rank) keeps N idle workers per node (NCCL_NODE_FT_SPARE=1,
output prefixed "s<k>:") that take a failed rank's place in the group's next round; the
launcher then starts a new spare instead of restarting the rank (docs/launcher.md).

Elastic: --nnodes MIN:MAX (or --rdzv-backend c10d) with the same --rdzv-endpoint (or
--master-addr/--master-port) and no --node-rank on every node. The first launcher on the
endpoint's machine hosts the store. A round closes when MAX nodes came, or when MIN came
and --rdzv-last-call passed; node ranks follow the join order. Later nodes wait as spares
and join the next round after a failure (a lost node's launcher counts as one); fewer
than MIN within --join-timeout ends the job with ERR_TIMEOUT.

etcd: --rdzv-backend etcd --rdzv-endpoint HOST:PORT --rdzv-id JOB keeps the rendezvous
in etcd under /nccl-node/JOB/, with a lease per launcher (--rdzv-lease-ttl); node rank 0
of each round hosts that attempt's store, so no single node's loss ends the job.

Example: nccl-node run --nproc-per-node 4 train.ts --epochs 3`;

/** Adds `run` to the program. */
export function registerRunCommand(program: Command): void {
  const cmd = program
    .command('run')
    .description('start this node\'s ranks of a job as one gang')
    .requiredOption('--nproc-per-node <n>', 'ranks to start on this node: a number, gpu, cpu or auto', nproc)
    .addOption(new Option('--nnodes <n>', 'number of nodes: N, or MIN:MAX for an elastic job').argParser(nodesArg).default({ min: 1, max: 1, elastic: false }, '1'))
    .option('--node-rank <k>', 'this node\'s index, 0 .. nnodes-1 (static rendezvous only; default 0)', integer(0))
    .option('--max-restarts <n>', 're-run the whole gang up to n times after a failure', integer(0), 0)
    .addOption(new Option('--restart-scope <scope>', 'what a failed rank restarts: gang (every rank) or rank (only it; the others re-form in-process, src/ft)').choices(['gang', 'rank']).default('gang'))
    .option('--spares <n>', 'with --restart-scope rank: idle worker processes kept up per node that take a failed rank\'s place at once', integer(0), 0)
    .option('--rdzv-backend <name>', 'static (node ranks given), c10d (node ranks in join order; implied by --nnodes MIN:MAX) or etcd (the rendezvous in etcd at --rdzv-endpoint)', backendArg, 'static')
    .option('--rdzv-lease-ttl <seconds>', 'etcd: a launcher whose lease is not renewed for this long is out of the job', secondsArg(1), 10)
    .option('--rdzv-endpoint <host:port>', 'where the launchers meet: the same as --master-addr/--master-port', endpointArg)
    .option('--rdzv-last-call <seconds>', 'elastic: once MIN nodes came, wait this long for more before closing a round', secondsArg(0), 30)
    .option('--master-addr <host>', 'address of node 0, where the store runs', DEFAULT_MASTER_ADDR)
    .option('--master-port <port>', `store port on node 0; 0 picks a free one (one node only); default: free on one node, ${DEFAULT_MASTER_PORT} on several`, integer(0, 65535))
    .option('--standalone', 'one node, store on a free local port (as torchrun --standalone)')
    .option('--rdzv-id <id>', 'the run id (TORCHELASTIC_RUN_ID, log directory name); default: random on one node, "none" on several')
    .option('--log-dir <dir>', 'where --redirects and --tee write each rank\'s output')
    .addOption(new Option('-r, --redirects <std>', 'rank output to the log files only: 0 none, 1 stdout, 2 stderr, 3 both, or e.g. 0:3,1:1'))
    .addOption(new Option('-t, --tee <std>', 'rank output to the log files and the console (same values as --redirects)'))
    .option('--local-ranks-filter <ranks>', 'only these local ranks\' output reaches the console, e.g. 0 or 0,3')
    .option('--join-timeout <seconds>', 'fail unless every rank joins within this long', secondsArg(1e-9), 600)
    .option('--grace-period <seconds>', 'between SIGTERM and SIGKILL when stopping ranks', secondsArg(0), 5)
    .option('--heartbeat-interval <seconds>', 'how often ranks heartbeat through the store; 0 turns heartbeats off', secondsArg(0), 5)
    .option('--heartbeat-timeout <seconds>', 'fail a rank whose heartbeat stopped for this long (default: 3 intervals)', secondsArg(1e-9))
    .option('--health-check', 'before joining each rendezvous round, test the store connection, a local collective and the GPUs; a failing node does not join')
    .option('--cpu-bind <mode>', 'none, or exclusive: each local rank on its own contiguous share of the CPUs this launcher may use, whole cores in NUMA order, under taskset (NCCL_NODE_CPUS tells the rank its list)', cpuBindArg, 'none')
    .option('--numa-binding <mode>', 'as torchrun: local rank i on CPUs of the NUMA node of GPU i, under taskset: node (all of them), socket (all of its socket\'s), exclusive (the node split among its GPUs), core-complex (one last-level cache of the node)', numaBindingArg)
    .option('--prefix', 'prefix output lines with "[rank] "')
    .option('--no-prefix', 'do not prefix output lines (the default)')
    .argument('<script>', 'the training script: .js, .mjs, .cjs, .ts, .mts or .cts')
    .argument('[args...]', 'arguments for the script')
    // Flags after the script name belong to the script.
    .passThroughOptions()
    .addHelpText('after', HELP_AFTER)
    .action(async (script: string, args: string[], flags: RunFlags) => {
      await run(script, args, flags);
    });
  const parseOptions = cmd.parseOptions.bind(cmd);
  cmd.parseOptions = (args: string[]) => {
    const takesValue = (flag: string): boolean => {
      const option = cmd.options.find((o) => o.long === flag || o.short === flag);
      return option !== undefined && (option.required || option.optional);
    };
    return parseOptions(normalizeRunArgs(args, takesValue));
  };
}

async function run(script: string, scriptArgs: string[], flags: RunFlags): Promise<never> {
  // A closed stdout (`| head`) must not kill the launcher and orphan the ranks.
  process.stdout.on('error', () => {});
  const etcd = flags.rdzvBackend === 'etcd';
  const elastic = flags.nnodes.elastic || flags.rdzvBackend === 'c10d' || etcd;
  if (etcd && flags.rdzvEndpoint === undefined) return usageError('--rdzv-backend etcd needs --rdzv-endpoint HOST:PORT, the etcd server\'s client address');
  const nnodesText = flags.nnodes.elastic ? `${flags.nnodes.min}:${flags.nnodes.max}` : String(flags.nnodes.min);
  if (elastic && flags.nodeRank !== undefined) {
    return usageError(`--node-rank does not go with --nnodes ${nnodesText}${flags.nnodes.elastic ? '' : ` --rdzv-backend ${flags.rdzvBackend}`}: node ranks follow the order in which nodes join`);
  }
  if (!elastic && (flags.nodeRank ?? 0) >= flags.nnodes.min) {
    return usageError(`--node-rank ${flags.nodeRank} must be below --nnodes ${nnodesText}`);
  }
  if (flags.rdzvEndpoint !== undefined && flags.masterPort !== undefined) {
    return usageError('--rdzv-endpoint and --master-port name the same thing; give one');
  }
  if (flags.standalone) {
    if (flags.nnodes.max !== 1 || elastic) return usageError(`--standalone runs one node, but --nnodes is ${nnodesText}`);
    if (flags.masterPort !== undefined && flags.masterPort !== 0) return usageError('--standalone picks a free port; leave out --master-port');
  }
  if ((flags.redirects !== undefined || flags.tee !== undefined) && flags.logDir === undefined) {
    return usageError('--redirects and --tee need --log-dir');
  }
  let launcher: Launcher;
  try {
    launcher = await Launcher.start({
      script,
      scriptArgs,
      nprocPerNode: resolveNproc(flags.nprocPerNode),
      ...(elastic ? { minNodes: flags.nnodes.min, maxNodes: flags.nnodes.max } : { nnodes: flags.nnodes.min, nodeRank: flags.nodeRank ?? 0 }),
      maxRestarts: flags.maxRestarts,
      restartScope: flags.restartScope,
      spares: flags.spares,
      ...(etcd ? { rdzvBackend: 'etcd' as const, leaseTtlMs: flags.rdzvLeaseTtl * 1000 } : {}),
      lastCallMs: flags.rdzvLastCall * 1000,
      masterAddr: flags.rdzvEndpoint?.host ?? flags.masterAddr,
      ...(flags.standalone ? { masterPort: 0 }
        : flags.rdzvEndpoint !== undefined ? { masterPort: flags.rdzvEndpoint.port }
          : flags.masterPort !== undefined ? { masterPort: flags.masterPort } : {}),
      ...(flags.rdzvId !== undefined ? { runId: flags.rdzvId } : {}),
      ...(flags.logDir !== undefined ? { logDir: flags.logDir } : {}),
      ...(flags.redirects !== undefined ? { redirects: parseStdMask(flags.redirects, '--redirects') } : {}),
      ...(flags.tee !== undefined ? { tee: parseStdMask(flags.tee, '--tee') } : {}),
      ...(flags.localRanksFilter !== undefined ? { localRanksFilter: parseRanksFilter(flags.localRanksFilter) } : {}),
      joinTimeoutMs: flags.joinTimeout * 1000,
      gracePeriodMs: flags.gracePeriod * 1000,
      heartbeatIntervalMs: flags.heartbeatInterval * 1000,
      ...(flags.heartbeatTimeout !== undefined ? { heartbeatTimeoutMs: flags.heartbeatTimeout * 1000 } : {}),
      healthCheck: flags.healthCheck ?? false,
      cpuBind: flags.cpuBind,
      ...(flags.numaBinding !== undefined ? { numaBinding: flags.numaBinding } : {}),
      prefix: flags.prefix ?? false,
    });
  } catch (err) {
    if (isNcclNodeError(err, 'ERR_INVALID_ARGUMENT')) return usageError(err.message);
    process.stderr.write(`nccl-node run: error${isNcclNodeError(err) ? ` [${err.code}]` : ''}: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  }
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => launcher.interrupt(sig));
  const result = await launcher.done;
  if (result.code !== undefined) process.stderr.write(`nccl-node run: error [${result.code}]: ${result.message}\n`);
  else if (result.exitCode !== 0) process.stderr.write(`nccl-node run: ${result.message}\n`);
  process.exit(result.exitCode);
}

function usageError(message: string): never {
  process.stderr.write(`nccl-node run: error: ${message}\n(add --help for usage)\n`);
  process.exit(USAGE_EXIT_CODE);
}
