/**
 * Per-rank memory of DDP and ZeRO-1/2/3 (mixed-precision AdamW: bf16 compute
 * parameters, bf16 reduction, float32 master shards) against the ZeRO paper's
 * model-state formulas, in bytes per parameter. Prints a table, writes JSON.
 *
 *   node --import tsx bench/runtime/memory.ts [--ranks 2,4] [--out bench/runtime/memory.json]
 *
 * Measured = the runtime's own persistent buffers after one step (DataParallel
 * .memory()); transient = the largest gathered-unit / unsharded-gradient bytes
 * alive at once during the step. DDP here is plain float32 (params 4 + grads 4
 * + Adam 8 = 16 bytes, the same total as the paper's 2 + 2 + 12).
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { DEFAULT_CONFIG, TinyLM } from '../../src/models/tiny-lm/tiny-lm.js';
import type { TrainConfig } from '../../src/train/loop.js';
import { runAll } from '../../test/runtime/cases.js';

const { values: a } = parseArgs({ options: { ranks: { type: 'string', default: '2,4' }, out: { type: 'string', default: 'bench/runtime/memory.json' } } });
const psi = new TinyLM(DEFAULT_CONFIG).numParams;
const mp = { paramDtype: 'bfloat16', reduceDtype: 'bfloat16' } as const;
const cases: [string, TrainConfig['parallel'], (n: number) => number][] = [
  ['DDP', { kind: 'ddp' }, () => 16],
  ['ZeRO-1', { kind: 'fsdp', stage: 1, ...mp }, (n) => 4 + 12 / n],
  ['ZeRO-2', { kind: 'fsdp', stage: 2, ...mp }, (n) => 2 + 14 / n],
  ['ZeRO-3', { kind: 'fsdp', stage: 3, ...mp }, (n) => 16 / n],
];
const rows: Record<string, number | string>[] = [];
for (const world of a.ranks!.split(',').map(Number)) {
  const runs = cases.map(([, parallel]): TrainConfig => ({
    model: DEFAULT_CONFIG, steps: 1, globalBatch: world, microBatches: 1, parallel,
    optimizer: { kind: 'adamw', lr: 1e-3 }, dataSeed: 1,
  }));
  const out = await runAll(world, runs, 590_000);
  out.forEach((r, i) => {
    const [name, , formula] = cases[i]!;
    const m = r.memory;
    const per = (b: number) => +(b / psi).toFixed(2);
    rows.push({
      ranks: world, strategy: name,
      params: per(m.params), grads: per(m.grads), optimizer: per(m.optimizer),
      total: per(m.params + m.grads + m.optimizer), formula: +formula(world).toFixed(2),
      transientMiB: +(m.peakTransient / 2 ** 20).toFixed(2),
    });
  });
}
console.table(rows);
console.log(`bytes per parameter, ${psi} parameters`);
writeFileSync(a.out!, JSON.stringify({ bench: 'runtime-memory', date: new Date().toISOString(), params: psi, rows }, null, 2) + '\n');
console.log(`wrote ${a.out}`);
