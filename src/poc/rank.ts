/**
 * The rank program `nccl-node poc` starts under its launcher, one gang per stage:
 *   rank.ts <stage> --out DIR --config DIR/poc-config.json [--backend gloo|nccl]
 * The configuration file is the resolved one the orchestrator wrote.
 */
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { resolvePocConfig } from './config.js';
import { runStage } from './run-stage.js';

const { positionals, values } = parseArgs({
  allowPositionals: true,
  options: { out: { type: 'string' }, config: { type: 'string' }, backend: { type: 'string', default: 'auto' } },
});
const [stage] = positionals;
if (!stage || !values.out || !values.config) {
  process.stderr.write('usage: rank.ts <stage> --out DIR --config FILE [--backend gloo|nccl|auto]\n');
  process.exit(2);
}
try {
  const cfg = resolvePocConfig(JSON.parse(await readFile(values.config, 'utf8')));
  await runStage(stage, { out: values.out, cfg, backend: values.backend as 'gloo' | 'nccl' | 'auto' });
} catch (err) {
  process.stderr.write(`poc ${stage}: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
}
