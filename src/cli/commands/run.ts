/**
 * `nccl-node run`: the gang launcher's command line (the work is in src/launch/launcher.ts).
 */
import { InvalidArgumentError, type Command } from 'commander';

import { isNcclNodeError } from '../../errors.js';
import { DEFAULT_MASTER_ADDR, DEFAULT_MASTER_PORT } from '../../launch/env.js';
import { Launcher } from '../../launch/launcher.js';

const USAGE_EXIT_CODE = 2;

interface RunFlags {
  nprocPerNode: number;
  nnodes: number;
  nodeRank: number;
  masterAddr: string;
  masterPort: number;
  joinTimeout: number;
  gracePeriod: number;
  prefix: boolean;
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
Every rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (node rank),
MASTER_ADDR, MASTER_PORT, NCCL_NODE_TOKEN, NCCL_NODE_STORE_HOSTED=1 and NCCL_NODE_LAUNCHER=1.
Node 0's launcher hosts the job's store on --master-addr:--master-port.

Several nodes: run the same command on every node with its own --node-rank, and export
the same secret NCCL_NODE_TOKEN on all of them first (e.g. \`export NCCL_NODE_TOKEN=$(openssl rand -hex 32)\`).
On one node the launcher makes a token itself.

Gang semantics: every rank must call init() within --join-timeout (a rank that exits 0
before joining is fine). When a rank fails, every rank on every node is stopped (SIGTERM,
SIGKILL after --grace-period) and the launcher exits with the failing rank's exit code
(128 + signal number for a signal); its last line on stderr says which rank failed and how.

Example: nccl-node run --nproc-per-node 4 train.ts --epochs 3`;

/** Adds `run` to the program. */
export function registerRunCommand(program: Command): void {
  program
    .command('run')
    .description('start this node\'s ranks of a job as one gang')
    .requiredOption('--nproc-per-node <n>', 'ranks to start on this node', integer(1, 4096))
    .option('--nnodes <n>', 'number of nodes in the job', integer(1), 1)
    .option('--node-rank <k>', 'this node\'s index, 0 .. nnodes-1', integer(0), 0)
    .option('--master-addr <host>', 'address of node 0, where the store runs', DEFAULT_MASTER_ADDR)
    .option('--master-port <port>', 'store port on node 0; 0 picks a free one (one node only)', integer(0, 65535), DEFAULT_MASTER_PORT)
    .option('--join-timeout <seconds>', 'fail unless every rank joins within this long', secondsArg(1e-9), 600)
    .option('--grace-period <seconds>', 'between SIGTERM and SIGKILL when stopping ranks', secondsArg(0), 5)
    .option('--no-prefix', 'do not prefix output lines with "[rank] "')
    .argument('<script>', 'the training script: .js, .mjs, .cjs, .ts, .mts or .cts')
    .argument('[args...]', 'arguments for the script')
    // Flags after the script name belong to the script.
    .passThroughOptions()
    .addHelpText('after', HELP_AFTER)
    .action(async (script: string, args: string[], flags: RunFlags) => {
      await run(script, args, flags);
    });
}

async function run(script: string, scriptArgs: string[], flags: RunFlags): Promise<never> {
  // A closed stdout (`| head`) must not kill the launcher and orphan the ranks.
  process.stdout.on('error', () => {});
  if (flags.nodeRank >= flags.nnodes) {
    return usageError(`--node-rank ${flags.nodeRank} must be below --nnodes ${flags.nnodes}`);
  }
  let launcher: Launcher;
  try {
    launcher = await Launcher.start({
      script,
      scriptArgs,
      nprocPerNode: flags.nprocPerNode,
      nnodes: flags.nnodes,
      nodeRank: flags.nodeRank,
      masterAddr: flags.masterAddr,
      masterPort: flags.masterPort,
      joinTimeoutMs: flags.joinTimeout * 1000,
      gracePeriodMs: flags.gracePeriod * 1000,
      prefix: flags.prefix,
    });
  } catch (err) {
    if (isNcclNodeError(err, 'ERR_INVALID_ARGUMENT')) return usageError(err.message);
    process.stderr.write(`nccl-node run: error: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  }
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => launcher.interrupt(sig));
  const result = await launcher.done;
  if (result.exitCode !== 0) process.stderr.write(`nccl-node run: ${result.message}\n`);
  process.exit(result.exitCode);
}

function usageError(message: string): never {
  process.stderr.write(`nccl-node run: error: ${message}\n(add --help for usage)\n`);
  process.exit(USAGE_EXIT_CODE);
}
