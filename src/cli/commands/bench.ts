/**
 * `nccl-node bench <test>`: nccl-tests' all_reduce_perf & co. (the work is in
 * src/nccl-tests/), and `nccl-node bench compare a.json b.json`.
 */
import { InvalidArgumentError, type Command } from 'commander';

import { compareFiles } from '../../nccl-tests/compare.js';
import { COLLECTIVES, findCollective } from '../../nccl-tests/collectives/index.js';
import { addBenchOptions, type BenchFlags } from '../../nccl-tests/flags.js';
import { CHILD_ENV, launchLocal } from '../../nccl-tests/launch.js';
import { benchRank } from '../../nccl-tests/rank.js';

const USAGE_EXIT_CODE = 2;

const HELP_AFTER = `
Tests: ${COLLECTIVES.map((c) => c.name).join(', ')} (or their nccl-tests names, e.g. all_reduce_perf).
Sizes take K/M/G suffixes (binary). Output, flags, defaults and exit codes follow nccl-tests:
exit 7 when results are wrong or NCCL_TESTS_MIN_BW is set and the average busbw misses it.

Examples:
  nccl-node bench all_reduce -b 8 -e 128M -f 2 --nproc-per-node 4
  nccl-node run --nproc-per-node 4 $(npm root)/nccl-node/bin/nccl-node.js bench all_gather -b 1M -e 64M -f 2
  srun -N 2 --ntasks-per-node 8 npx nccl-node bench all_reduce_perf -b 8 -e 8G -f 2 -J run.json
  nccl-node bench compare old.json new.json --threshold 5`;

function percent(value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0) throw new InvalidArgumentError('expected a percentage >= 0');
  return n;
}

/** The arguments after "bench", as typed, to hand to the ranks unchanged. */
function benchArgs(cmd: Command): string[] {
  // rawArgs is commander's copy of the argv it parsed (not in its typings).
  const raw = (cmd.parent as { rawArgs?: string[] } | null)?.rawArgs ?? process.argv;
  const at = raw.indexOf('bench', 2);
  return at < 0 ? [] : raw.slice(at + 1);
}

export function registerBenchCommand(program: Command): void {
  const cmd = program
    .command('bench')
    .description('nccl-tests compatible benchmark of a collective (all_reduce_perf, ...), or `bench compare a.json b.json`')
    .argument('<test>', 'all_reduce, all_gather, broadcast, reduce_scatter, reduce, alltoall, gather, scatter, sendrecv, hypercube, or compare')
    .argument('[files...]', 'for compare: the two JSON files')
    .option('--threshold <percent>', 'for compare: flag sizes whose busbw dropped by more than this', percent, 5)
    .addHelpText('after', HELP_AFTER);
  addBenchOptions(cmd);
  cmd.action(async (test: string, files: string[], flags: BenchFlags & { threshold: number }, self: Command) => {
    if (test === 'compare') process.exit(compareFiles(files, flags.threshold, (l) => process.stdout.write(`${l}\n`)));
    const coll = findCollective(test);
    if (!coll) {
      process.stderr.write(`nccl-node bench: unknown test "${test}"; expected one of ${COLLECTIVES.map((c) => c.name).join(', ')} (or e.g. all_reduce_perf)\n`);
      process.exit(USAGE_EXIT_CODE);
    }
    if (files.length) {
      process.stderr.write(`nccl-node bench: unexpected argument ${files[0]}\n`);
      process.exit(USAGE_EXIT_CODE);
    }
    const args = benchArgs(self);
    if (flags.nprocPerNode !== undefined && !process.env[CHILD_ENV]) process.exit(await launchLocal(flags.nprocPerNode, args));
    process.exit(await benchRank(coll, flags, [`${coll.name}_perf`, ...args]));
  });
}
