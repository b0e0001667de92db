/**
 * 3D layouts, measured against their formulas:
 *
 * 1. Memory per rank per layout: the float32 elements each rank holds between steps
 *    (parameters, gradients, AdamW state) and the most activations its stage held at
 *    once, as train3d reports them, against formulas written out here from the GPT's
 *    shapes: a rank's parameters are its stage's blocks (plus the embedding on the
 *    first stage, the head on the last) with the tensor-parallel ones divided by tp;
 *    ZeRO divides what it shards by dp; 1F1B holds min(P - s, M) micro-batches on
 *    stage s, each block keeping the arrays its backward reads (or only its input
 *    with recomputation). A ratio of 1.000 means the formula accounts for every
 *    element. The baseline row is one process holding the whole model (1, 1, 1).
 * 2. Tensor-parallel communication per layer: one forward/backward of the
 *    tensor-parallel GPT alone (the whole world one tp group), its collectives'
 *    bytes per kind (nccl-tests' message sizes) against Megatron's count (per block
 *    two all-reduces of tokens x dim forward and two backward; with sequence
 *    parallelism two all-gathers and two reduce-scatters each way instead; plus the
 *    embedding, head and cross-entropy), and their share of the pass's time.
 *
 *   node --import tsx bench/runtime/layouts.ts [--steps 3] [--out bench/runtime/layouts.json]
 *
 * On a 2-core machine the step times of 4 ranks measure the scheduler as much as
 * the layout: read them as relative, the memory columns as exact.
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { GPTConfig } from '../../src/models/gpt/gpt.js';
import { stageBlocks } from '../../src/models/gpt/gpt-pipeline-stage.js';
import type { ZeroStage } from '../../src/train/dp-optimizer.js';
import { runRanks } from '../../test/helpers/ranks.js';
import { median } from '../stats.js';

const { values: a } = parseArgs({
  options: {
    steps: { type: 'string', default: '3' },
    out: { type: 'string', default: 'bench/runtime/layouts.json' },
  },
});
const steps = Number(a.steps);
const model: GPTConfig = { vocab: 64, dim: 32, heads: 4, layers: 4, seqLen: 16, hidden: 128, seed: 1 };
const GLOBAL = 8, MICRO = 2;

interface Layout { dp: number; tp: number; pp: number; zero: ZeroStage; sp?: boolean; recompute?: boolean }
const layouts: Layout[] = [
  { dp: 1, tp: 1, pp: 1, zero: 0 },
  { dp: 4, tp: 1, pp: 1, zero: 0 }, { dp: 4, tp: 1, pp: 1, zero: 1 }, { dp: 4, tp: 1, pp: 1, zero: 2 }, { dp: 4, tp: 1, pp: 1, zero: 3 },
  { dp: 1, tp: 4, pp: 1, zero: 0 }, { dp: 1, tp: 4, pp: 1, zero: 0, sp: true },
  { dp: 1, tp: 1, pp: 4, zero: 0 }, { dp: 1, tp: 1, pp: 4, zero: 0, recompute: true },
  { dp: 2, tp: 2, pp: 1, zero: 3 }, { dp: 1, tp: 2, pp: 2, zero: 0, sp: true }, { dp: 2, tp: 1, pp: 2, zero: 2 },
];

/** This rank's parameter elements: its stage's units, tensor-parallel tensors divided by tp. */
function paramsFormula(l: Layout, stage: number): number {
  const { vocab: V, dim: D, hidden: H, seqLen: T, layers: L } = model;
  const t = l.tp;
  const block = 2 * D + (3 * D * D + 3 * D) / t + (D * D) / t + D + 2 * D + (D * H + H) / t + (H * D) / t + D;
  const [first, end] = stageBlocks(L, l.pp, stage);
  return (end - first) * block + (stage === 0 ? (V * D) / t + T * D : 0) + (stage === l.pp - 1 ? 2 * D + (D * V) / t : 0);
}

/** Peak activation elements of stage s under 1F1B: min(P - s, M) micro-batches of its blocks' saved arrays. */
function activationsFormula(l: Layout, stage: number): number {
  const { dim: D, hidden: H, seqLen: T, heads, layers: L } = model;
  const rows = GLOBAL / l.dp / MICRO, N = rows * T, t = l.tp;
  const r = l.sp ? N / t : N; // rows a rank keeps between the tensor-parallel layers
  const norm = r * D + r; // normalised rows and one rstd per row
  const perBlock = l.recompute ? r * D
    : norm + N * D + (3 * N * D) / t + rows * (heads / t) * T * T + (N * D) / t + norm + N * D + (2 * N * H) / t + r * D;
  const [first, end] = stageBlocks(L, l.pp, stage);
  return Math.min(l.pp - stage, MICRO) * (end - first) * perBlock;
}

const memoryRows: Record<string, string | number>[] = [];
for (const l of layouts) {
  const world = l.dp * l.tp * l.pp;
  const ranks = await runRanks<{ coords: { dp: number; tp: number; pp: number }; memory: Record<string, number>; paramElements: number; stepMs: number[] }>(
    'bench/runtime/layouts-worker.ts', world, {
      payload: { mode: 'train3d', cfg: { model, mesh: { dp: l.dp, tp: l.tp, pp: l.pp }, zero: l.zero, sequenceParallel: l.sp, recompute: l.recompute, steps: steps + 1, globalBatch: GLOBAL, micro: MICRO, schedule: '1f1b', optimizer: { kind: 'adamw', lr: 1e-3 } } },
      check: true, timeoutMs: 590_000,
    });
  // One row per pipeline stage (the dp and tp ranks of a stage hold the same amounts).
  for (let stage = 0; stage < l.pp; stage++) {
    const x = ranks.find((r) => r.result!.coords.pp === stage && r.result!.coords.dp === 0 && r.result!.coords.tp === 0)!.result!;
    const n = paramsFormula(l, stage), shard = Math.ceil(n / l.dp);
    const want = { params: l.zero === 3 ? shard : n, grads: l.zero >= 2 ? 0 : n, optimizer: l.zero ? 2 * shard : 2 * n, activations: activationsFormula(l, stage) };
    const held = x.memory.params! + x.memory.grads! + x.memory.optimizer!;
    memoryRows.push({
      layout: `(${l.dp},${l.tp},${l.pp})${l.zero ? ` ZeRO-${l.zero}` : ''}${l.sp ? ' SP' : ''}${l.recompute ? ' recompute' : ''}`,
      stage,
      paramsMeasured: x.memory.params!, paramsRatio: +(x.memory.params! / want.params).toFixed(3),
      gradsMeasured: x.memory.grads!, gradsFormula: want.grads,
      optimizerMeasured: x.memory.optimizer!, optimizerRatio: +(x.memory.optimizer! / want.optimizer).toFixed(3),
      stateMiB: +((held * 4) / 2 ** 20).toFixed(3),
      activationsMeasured: x.memory.activationsPeak!, activationsRatio: +(x.memory.activationsPeak! / want.activations).toFixed(3),
      stepMs: +median(ranks.map((r) => median(r.result!.stepMs.slice(1)))).toFixed(1),
    });
  }
}
const base = memoryRows[0]!;
for (const row of memoryRows) row.stateVsOneProcess = +((row.stateMiB as number) / (base.stateMiB as number)).toFixed(3);
console.table(memoryRows);

const tpRows: Record<string, string | number>[] = [];
const ROWS = 2, N = ROWS * model.seqLen, S = N * model.dim * 4;
for (const tp of [2, 4]) {
  for (const sp of [false, true]) {
    const ranks = await runRanks<{ passMs: number[]; perPass: Record<string, { calls: number; bytes: number; seconds: number }> }>(
      'bench/runtime/layouts-worker.ts', tp, { payload: { mode: 'tp', model, rows: ROWS, steps, sequenceParallel: sp }, check: true, timeoutMs: 590_000 });
    const x = ranks[0]!.result!;
    const kinds = x.perPass;
    const L = model.layers;
    // Megatron's count: per block two all-reduces of S forward and two backward (sequence parallel: each one
    // all-gather plus one reduce-scatter of S); the vocab-parallel embedding and head add one each way, the
    // cross-entropy three per-row all-reduces (max, sum, target: 3N floats) and, sequence parallel, one
    // all-reduce of the replicated parameters' gradients (positions, norms, row-parallel biases).
    const replicated = model.seqLen * model.dim + L * 6 * model.dim + 2 * model.dim;
    const blockBytes: Record<string, number> = sp
      ? { allGather: (4 * L + 2) * S, reduceScatter: (4 * L + 2) * S, allReduce: (3 * N + replicated) * 4 }
      : { allReduce: (4 * L + 2) * S + 3 * N * 4 };
    const commSeconds = Object.values(kinds).reduce((s, k) => s + k.seconds, 0);
    for (const [kind, want] of Object.entries(blockBytes)) {
      const got = kinds[kind] ?? { calls: 0, bytes: 0, seconds: 0 };
      tpRows.push({
        tp, sequenceParallel: sp ? 'yes' : 'no', kind, callsPerPass: got.calls,
        bytesPerPass: got.bytes, formulaBytes: want, perLayerKiB: +((got.bytes / L) / 1024).toFixed(1),
        ratio: +(got.bytes / want).toFixed(3),
        commShareOfPass: +(commSeconds / (median(x.passMs) / 1000)).toFixed(3), passMs: +median(x.passMs).toFixed(1),
      });
    }
  }
}
console.table(tpRows);
writeFileSync(a.out!, JSON.stringify({ bench: 'layouts', date: new Date().toISOString(), model, globalBatch: GLOBAL, micro: MICRO, memory: memoryRows, tensorParallel: tpRows }, null, 2) + '\n');
console.log(`wrote ${a.out}`);
