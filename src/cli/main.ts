/**
 * The `nccl-node` command line. Each subcommand lives in its own file under
 * ./commands and exports a function that adds it to the program; add new ones
 * (bench, doctor, ckpt, ...) to SUBCOMMANDS below.
 *
 * Exit codes: 2 for bad usage (unknown flag, bad value, missing script); otherwise
 * whatever the subcommand decides (`run`: the failing rank's code).
 */
import { realpathSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Command, CommanderError } from 'commander';

import { registerBenchCommand } from './commands/bench.js';
import { registerDoctorCommand } from './commands/doctor.js';
import { registerRunCommand } from './commands/run.js';
import { registerCkptCommand } from './commands/ckpt.js';
import { registerDataCommand } from './commands/data.js';
import { registerJobspecCommand } from './commands/jobspec-command.js';
import { registerPlanCommands } from './commands/plan.js';
import { registerPocCommand } from './commands/poc.js';
import { registerTopCommand } from './commands/top.js';
import { registerTraceCommand } from './commands/trace.js';

export type RegisterCommand = (program: Command) => void;

export const SUBCOMMANDS: readonly RegisterCommand[] = [
  registerRunCommand, registerBenchCommand, registerCkptCommand, registerDataCommand, registerJobspecCommand, registerDoctorCommand, registerPocCommand, registerPlanCommands, registerTopCommand, registerTraceCommand,
];

export const USAGE_EXIT_CODE = 2;

export function buildProgram(): Command {
  const program = new Command('nccl-node')
    .description('Collective communication for Node.js training code (NCCL on GPUs, Gloo on CPUs).')
    // Throw instead of exiting, so usage errors get exit code 2 (see main).
    .exitOverride()
    .showHelpAfterError('(add --help for usage)')
    // Lets `run` pass flags after the script name through to the script.
    .enablePositionalOptions();
  for (const register of SUBCOMMANDS) register(program);
  return program;
}

/** Runs the CLI with `argv` (node, script, ...args). */
export async function main(argv: readonly string[] = process.argv): Promise<void> {
  const program = buildProgram();
  try {
    await program.parseAsync([...argv]);
  } catch (err) {
    if (err instanceof CommanderError) {
      // Commander has already printed the message (or the help / version text).
      process.exit(err.exitCode === 0 ? 0 : USAGE_EXIT_CODE);
    }
    throw err;
  }
}

function isEntryPoint(): boolean {
  const entry = process.argv[1];
  if (entry === undefined) return false;
  try {
    return realpathSync(entry) === realpathSync(fileURLToPath(import.meta.url));
  } catch {
    return false;
  }
}

// `node dist/cli/main.js ...` works too; bin/nccl-node.js imports this file and calls main().
if (isEntryPoint()) await main();
