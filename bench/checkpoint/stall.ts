/**
 * The stall of an async save (what the training step waits for: the snapshot copy)
 * for the first save against the later ones, with the host staging pool off
 * (budget 0: every save copies into memory allocated for it), on (the first save
 * fills new slabs, later ones reuse them), and on after Checkpointer.prepare()
 * (slabs allocated and touched before the first save). Each variant runs in a
 * process of its own, so no variant inherits memory another one touched.
 *
 *   node --import tsx bench/checkpoint/stall.ts [--mib 256] [--saves 4] [--dir /var/tmp] [--json out.json]
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Checkpointer, type CheckpointState } from '../../src/checkpoint/index.js';
import { median } from '../stats.js';

const { values } = parseArgs({
  options: {
    mib: { type: 'string', default: '256' }, saves: { type: 'string', default: '4' }, dir: { type: 'string', default: '/var/tmp' },
    json: { type: 'string' }, variant: { type: 'string' },
  },
});
const VARIANTS = ['pool off', 'pool on', 'pool on + prepare'] as const;
type Variant = (typeof VARIANTS)[number];

interface Result {
  variant: Variant;
  firstStallMs: number;
  laterStallsMs: number[];
  laterMedianMs: number;
  firstOverLater: number;
  prepareMs: number;
  stats: ReturnType<Checkpointer['stagingStats']>;
}


/** One variant, in this process: a state of `mib` MiB in 64 MiB float32 tensors, `saves` async saves. */
async function runVariant(variant: Variant, mib: number, saves: number, root: string): Promise<Result> {
  const TENSOR = 16 << 20; // elements: 64 MiB
  const tensors: CheckpointState['tensors'] = {};
  for (let left = (mib << 20) / 4, i = 0; left > 0; left -= TENSOR, i++) {
    const a = new Float32Array(Math.min(TENSOR, left)).fill(i + 0.5); // the state itself is warm
    tensors[`t${i}`] = { data: a, globalShape: [a.length], offset: 0 };
  }
  const ck = await Checkpointer.create(root, { keep: 1, staging: variant === 'pool off' ? { budgetBytes: 0 } : {} });
  let prepareMs = 0;
  if (variant === 'pool on + prepare') {
    const t0 = performance.now();
    await ck.prepare({ tensors, train: { step: 0 } });
    prepareMs = performance.now() - t0;
  }
  const stalls: number[] = [];
  for (let s = 1; s <= saves; s++) {
    const h = await ck.save({ tensors, train: { step: s } }, { async: true });
    stalls.push(h.stallMs);
    await h.committed; // the next save's stall is its own copy, not a queue
  }
  const stats = ck.stagingStats();
  await ck.close();
  const later = stalls.slice(1);
  return { variant, firstStallMs: stalls[0]!, laterStallsMs: later, laterMedianMs: median(later), firstOverLater: stalls[0]! / median(later), prepareMs, stats };
}

const mib = Number(values.mib);
const saves = Math.max(2, Number(values.saves));
if (values.variant) {
  const root = mkdtempSync(join(values.dir, 'ckpt-stall-'));
  try {
    const r = await runVariant(values.variant as Variant, mib, saves, root);
    process.stdout.write(`@@${JSON.stringify(r)}\n`);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
} else {
  const self = fileURLToPath(import.meta.url);
  const rows: Result[] = [];
  for (const v of VARIANTS) {
    const out = execFileSync(process.execPath, ['--import', 'tsx', self, '--variant', v, '--mib', String(mib), '--saves', String(saves), '--dir', values.dir], { encoding: 'utf8' });
    const line = out.split('\n').find((l) => l.startsWith('@@'));
    if (!line) throw new Error(`variant ${v}: no result\n${out}`);
    rows.push(JSON.parse(line.slice(2)) as Result);
  }
  const f = (x: number, d = 1) => x.toFixed(d).padStart(8);
  console.log(`async save stall, ${mib} MiB of host tensors, ${saves} saves (first vs median of the later ones)`);
  console.log('variant              first ms  later ms  first/later  prepare ms  pool held MiB  hits  misses  outside');
  for (const r of rows) {
    console.log(`${r.variant.padEnd(19)} ${f(r.firstStallMs)} ${f(r.laterMedianMs)} ${f(r.firstOverLater, 2).padStart(12)} ${f(r.prepareMs).padStart(11)} ${f(r.stats.heldBytes / 2 ** 20, 0).padStart(14)} ${String(r.stats.hits).padStart(5)} ${String(r.stats.misses).padStart(7)} ${String(r.stats.overBudget).padStart(8)}`);
  }
  const off = rows[0]!, prep = rows[2]!;
  console.log(`first save: pool on + prepare ${(off.firstStallMs / prep.firstStallMs).toFixed(1)}x shorter than pool off`);
  const doc = { date: new Date().toISOString(), host: { cpus: cpus().length }, mib, saves, rows };
  console.log(JSON.stringify(doc));
  if (values.json) writeFileSync(values.json, JSON.stringify(doc, null, 2));
}
