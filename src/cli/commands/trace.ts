/**
 * `nccl-node trace analyze DIR`: explains a hang from the ranks' flight records
 * (src/metrics/trace-analyze.ts). Exit codes: 0 analysed (whether or not the ranks
 * diverged), 1 the directory holds no readable records, 2 bad usage.
 */
import type { Command } from 'commander';

import { analyzeTraceDir, formatTraceAnalysis } from '../../metrics/trace-analyze.js';

export function registerTraceCommand(program: Command): void {
  const trace = program.command('trace').description('flight records: why a job hung');
  trace.command('analyze <dir>')
    .description('merge every rank\'s flight record in DIR and name, per communicator, the first collective where the ranks diverge, the ranks that never arrived and what they were last doing')
    .option('--json', 'print the analysis as JSON')
    .action((dir: string, opts: { json?: boolean }) => {
      try {
        const a = analyzeTraceDir(dir);
        process.stdout.write(`${opts.json ? JSON.stringify(a, null, 2) : formatTraceAnalysis(a)}\n`);
      } catch (err) {
        process.stderr.write(`nccl-node trace: ${(err as Error).message}\n`);
        process.exitCode = 1;
      }
    });
}
