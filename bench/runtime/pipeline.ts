/**
 * Pipeline bubble, measured against the formula: GPT over P stages, GPipe, 1F1B and
 * interleaved 1F1B (2 chunks per rank; M a multiple of P) and ZB-H1, M micro-batches. A stage's
 * bubble is the part of the step it does not compute (1 - compute / wall; this
 * includes its send/recv time); the formula is (P - 1) / (M + P - 1) for GPipe and
 * 1F1B, (P - 1) / (v·M + P - 1) interleaved (the warm-up and cool-down shrink v-fold),
 * (P - 1) / (3M + P - 1) for ZB-H1 (its idle time a third of 1F1B's when F, B and W cost the same). The baseline, run by the same script, is the
 * whole model in one process on the same batch: speedup = its step time / the
 * pipeline's. Prints a table, writes JSON.
 *
 *   node --import tsx bench/runtime/pipeline.ts [--stages 2] [--micro 1,2,4,8] [--steps 5] [--out bench/runtime/pipeline.json]
 *
 * One rank per core: on a 2-core machine only --stages 2 measures a pipeline rather
 * than the scheduler.
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { GPT, type GPTConfig } from '../../src/models/gpt/gpt.js';
import { runRanks } from '../../test/helpers/ranks.js';
import { median } from '../stats.js';

const { values: a } = parseArgs({
  options: {
    stages: { type: 'string', default: '2' },
    micro: { type: 'string', default: '1,2,4,8' },
    steps: { type: 'string', default: '5' },
    out: { type: 'string', default: 'bench/runtime/pipeline.json' },
  },
});
const P = Number(a.stages), steps = Number(a.steps);
const cfg: GPTConfig = { vocab: 64, dim: 64, heads: 4, layers: 4 * P, seqLen: 32, hidden: 256, seed: 1 };
const ROWS = 2; // rows per micro-batch

/** One process, the whole model, the same M x ROWS rows in one forward/backward. */
async function baseline(micro: number): Promise<number> {
  const model = new GPT(cfg);
  const rows = micro * ROWS;
  const tokens = Int32Array.from({ length: rows * (cfg.seqLen + 1) }, (_, i) => (i * 7919) % cfg.vocab);
  const times: number[] = [];
  for (let s = -1; s < steps; s++) {
    const t = performance.now();
    await model.forwardBackward(tokens, rows, { gradScale: 1 / (rows * cfg.seqLen) });
    if (s >= 0) times.push(performance.now() - t);
  }
  return median(times);
}

const rows: Record<string, number | string>[] = [];
for (const micro of a.micro!.split(',').map(Number)) {
  const single = await baseline(micro);
  for (const [name, chunks] of [['gpipe', 1], ['1f1b', 1], ['interleaved-1f1b', 2], ['zb-h1', 1]] as const) {
    if (micro % P !== 0 && chunks > 1) continue;
    const ranks = await runRanks<{ wall: number[]; busy: number[] }>('bench/runtime/pipeline-worker.ts', P, {
      payload: { cfg, name, micro, rows: ROWS, steps, chunks }, check: true, timeoutMs: 590_000,
    });
    const wall = median(ranks.map((r) => median(r.result!.wall)));
    const bubbles = ranks.map((r) => 1 - median(r.result!.busy) / median(r.result!.wall));
    rows.push({
      schedule: chunks > 1 ? `${name} (v=${chunks})` : name, stages: P, micro,
      bubbleMeasured: +(bubbles.reduce((x, y) => x + y, 0) / P).toFixed(3),
      bubbleWorstStage: +Math.max(...bubbles).toFixed(3),
      // ZB-H1 with F, B and W of equal cost: a third of 1F1B's idle time, (P - 1) / (3M + P - 1) of the step.
      bubbleFormula: +(name === 'zb-h1' ? (P - 1) / (3 * micro + P - 1) : (P - 1) / (chunks * micro + P - 1)).toFixed(3),
      stepMs: +wall.toFixed(1), singleProcessMs: +single.toFixed(1), speedup: +(single / wall).toFixed(2),
    });
  }
}
console.table(rows);
writeFileSync(a.out!, JSON.stringify({ bench: 'pipeline-bubble', date: new Date().toISOString(), model: cfg, rowsPerMicro: ROWS, rows }, null, 2) + '\n');
console.log(`wrote ${a.out}`);
