/**
 * Finetune stage at 2 ranks on Gloo: a tiny FSDP pretrain with a checkpoint, then
 * finetuneStage from it. The accuracies it reports are recomputed here in one process
 * from the checkpoints on disk; the finetune is a new run (its checkpoint counts its
 * own steps and optimizer steps) that starts from the pretrained weights.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, expect, it } from 'vitest';
import { readManifest } from '../../src/checkpoint/index.js';
import type { TinyLMConfig } from '../../src/models/tiny-lm/tiny-lm.js';
import { exactMatch, loadModel } from '../../src/poc/generate.js';
import { finetuneRows } from '../../src/poc/finetune.js';
import type { StageResult } from '../../src/poc/stage.js';
import { additionProblems } from '../../src/poc/tasks.js';
import { CompactVocab } from '../../src/poc/vocab.js';
import { runRanks } from '../helpers/ranks.js';

const RANK = fileURLToPath(new URL('./finetune-rank.ts', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'poc-finetune-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Out { rank: number; from: string; model: TinyLMConfig; pretrainLosses: number[]; result: StageResult }

it('finetunes from the pretrained checkpoint as a new run; the accuracies match a single-process recomputation', async () => {
  const steps = 400;
  const out = (await runRanks<Out>(RANK, 2, { payload: { dir, pretrainSteps: 150, finetuneSteps: steps }, check: true, timeoutMs: 55_000 })).map((r) => r.result!);
  const [r0, r1] = out;
  const m = r0!.result.metrics as { accuracyBefore: number; accuracyAfter: number; correctBefore: number; correctAfter: number; checkpoint: string; losses: number[] };
  // Every rank reports the same stage result.
  expect(r1!.result.metrics).toEqual(m);
  expect(r1!.result.gates).toEqual(r0!.result.gates);

  const problems = additionProblems({ maxOperand: 9, seed: 5 });
  const vocab = await CompactVocab.read(join(dir, 'vocab.json'));
  const before = await exactMatch(await loadModel(r0!.from, r0!.model), vocab, problems.heldOut);
  const after = await exactMatch(await loadModel(m.checkpoint, r0!.model), vocab, problems.heldOut);
  expect(m.correctBefore).toBe(before.correct);
  expect(m.correctAfter).toBe(after.correct);
  expect(m.accuracyBefore).toBe(before.correct / problems.heldOut.length);
  expect(m.accuracyAfter).toBe(after.correct / problems.heldOut.length);
  expect(after.correct).toBeGreaterThanOrEqual(before.correct);
  expect(after.correct).toBeGreaterThan(0);

  // A new run: step and optimizer step count from 0, so both equal the finetune's steps.
  const manifest = await readManifest(m.checkpoint);
  expect(manifest.step).toBe(steps);
  expect(manifest.train.optimizerStep).toBe(steps);
  expect(m.losses).toHaveLength(steps);
  // ... from the pretrained weights: its first loss is the trained model's, not a fresh init's.
  expect(m.losses[0]!).toBeLessThan(r0!.pretrainLosses[0]! - 1);
  expect(m.losses.at(-1)!).toBeLessThan(m.losses[0]!);

  const gates = Object.fromEntries(r0!.result.gates.map((g) => [g.name, g]));
  expect(gates['held-out exact-match accuracy']).toMatchObject({ measured: after.correct / problems.heldOut.length, threshold: 0.1 });
  expect(gates['problems gained over the pretrained model']).toMatchObject({ measured: after.correct - before.correct, threshold: 1 });
  expect(r0!.result.plots[0]!.rows).toHaveLength(steps);
}, 60_000);

it('builds rows that start with a problem, depend only on the step, and slice the global batch by rank', () => {
  const encoded = [Int32Array.of(1, 2, 3, 4, 5, 6), Int32Array.of(7, 8, 9, 10, 11, 12)];
  const global = finetuneRows(encoded, 8, 3, 4, 0, 4);
  expect(finetuneRows(encoded, 8, 3, 4, 2, 2)).toEqual(global.subarray(2 * 9));
  expect(finetuneRows(encoded, 8, 3, 5, 0, 4)).not.toEqual(global);
  for (let r = 0; r < 4; r++) {
    const row = Array.from(global.subarray(r * 9, r * 9 + 9));
    expect([1, 7]).toContain(row[0]);
    expect([[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12]]).toContainEqual(row.slice(0, 6));
    expect([1, 7]).toContain(row[6]);
  }
});
