/**
 * `nccl-node plan --calibrate`: measure this machine into a hardware profile (saved
 * with --out), print it and the predicted DDP step times of the example models at
 * 1, 2 and 4 ranks; and `--hardware FILE` for plan: the profile's GPU figures,
 * efficiency and storage bandwidth as the plan's defaults.
 */
import { writeFile } from 'node:fs/promises';
import { NcclNodeError } from '../../errors.js';
import { GPT_TEST_CONFIG } from '../../models/gpt/gpt.js';
import { DEFAULT_CONFIG } from '../../models/tiny-lm/tiny-lm.js';
import { formatPrediction, formatProfile } from '../../plan/format.js';
import { predict, type ExampleModel } from '../../plan/predict.js';
import { readProfile, type HardwareProfile } from '../../plan/profile.js';
import type { PlanInput } from '../../plan/schema.js';

type Flags = Record<string, string | boolean | string[] | undefined>;

/** The example models predict() is shown for: TinyLM's default and GPT's test shape. */
export const EXAMPLE_MODELS: Record<string, ExampleModel> = {
  'tiny-lm': { kind: 'tiny-lm', config: DEFAULT_CONFIG },
  gpt: { kind: 'gpt', config: GPT_TEST_CONFIG },
};
export const EXAMPLE_RANKS = [1, 2, 4];
/** Sequences per step in the shown predictions (divisible by every rank count). */
export const EXAMPLE_GLOBAL_BATCH = 8;

export function withHardware(input: PlanInput, file: string | boolean | string[] | undefined): PlanInput {
  if (typeof file !== 'string') return input;
  const p = readProfile(file);
  return {
    ...input,
    cluster: { ...input.cluster, spec: p.gpu },
    efficiency: input.efficiency ?? p.efficiency,
    storageBandwidth: input.storageBandwidth ?? p.storageBandwidth,
  };
}

export function examplePredictions(profile: HardwareProfile) {
  return Object.entries(EXAMPLE_MODELS).flatMap(([name, model]) => EXAMPLE_RANKS.map((ranks) => ({
    model: name, ranks, globalBatch: EXAMPLE_GLOBAL_BATCH, prediction: predict(profile, { model, ranks, globalBatch: EXAMPLE_GLOBAL_BATCH }),
  })));
}

function positive(f: Flags, key: string, flag: string): number | undefined {
  const v = f[key];
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!(typeof v === 'string' && Number.isFinite(n) && n > 0)) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `plan: ${flag}: expected a positive number, got ${JSON.stringify(v)}`);
  return n;
}

export async function calibrateCommand(f: Flags): Promise<void> {
  const { calibrate } = await import('../../plan/calibrate.js');
  const profile = await calibrate({
    ms: positive(f, 'calibrateMs', '--calibrate-ms'),
    ranks: positive(f, 'calibrateRanks', '--calibrate-ranks'),
    maxBytes: positive(f, 'calibrateMaxBytes', '--calibrate-max-bytes'),
    diskBytes: positive(f, 'diskBytes', '--disk-bytes'),
    diskDir: typeof f.diskDir === 'string' ? f.diskDir : undefined,
  });
  if (typeof f.out === 'string') await writeFile(f.out, `${JSON.stringify(profile, null, 2)}\n`);
  const predictions = examplePredictions(profile);
  if (f.json) {
    process.stdout.write(`${JSON.stringify({ profile, predictions }, null, 2)}\n`);
    return;
  }
  process.stdout.write(formatProfile(profile));
  process.stdout.write(`\npredicted DDP step, ${EXAMPLE_GLOBAL_BATCH} sequences per step (TinyLM default, GPT test shape):\n`);
  process.stdout.write(formatPrediction(predictions.map((p) => ({ label: `${p.model} x${p.ranks}`, p: p.prediction }))));
  if (typeof f.out === 'string') process.stdout.write(`profile: ${f.out} (plan --hardware ${f.out})\n`);
}
