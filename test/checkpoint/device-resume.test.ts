/**
 * Checkpoints of the GPU runtime (device storage of ddp.ts, fsdp.ts) on the stand-in
 * libcuda/libnccl (never skipped: test/gpu/helpers.ts throws when the build or its
 * stand-ins are missing). At 2 ranks with DeviceBuffers, for DDP, ZeRO-3 (AdamW),
 * ZeRO-1 (SGD with momentum) and ZeRO-2 with bf16 parameters: K steps, trainingState() save, on to N, must be
 * bit-identical to N straight steps; a fresh job that loadTraining()s the
 * checkpoint and runs K..N must be too (losses and parameters). Then the ZeRO-3
 * checkpoint loads into the host DistributedDataParallel on Gloo at 3 ranks and
 * gives the saved parameters bit for bit (per-parameter pieces, padding dropped).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { standinEnv } from '../gpu/helpers.js';
import { runRanks } from '../helpers/ranks.js';
import { latest, readManifest } from '../../src/checkpoint/index.js';
import type { TrainConfig } from '../../src/train/loop.js';
import type { DeviceRun, Payload } from './device-train-worker.js';

const WORKER = fileURLToPath(new URL('./device-train-worker.ts', import.meta.url));
const N = 4;
const K = 2;
/** Small, with odd unit sizes (1035, 1177 per block) so 2-rank shards carry padding. */
const MODEL = { vocab: 61, dim: 15, hidden: 37, layers: 2, seqLen: 8, seed: 5 };

const cfg = (parallel: TrainConfig['parallel'], optimizer: TrainConfig['optimizer'] = { kind: 'adamw', lr: 1e-2, weightDecay: 0.01 }): TrainConfig =>
  ({ model: MODEL, steps: N, globalBatch: 4, microBatches: 1, parallel, optimizer, dataSeed: 3 });

const CASES: [string, TrainConfig][] = [
  ['DDP', cfg({ kind: 'ddp', firstBucketBytes: 4096, bucketBytes: 16384 })],
  ['ZeRO-3', cfg({ kind: 'fsdp', stage: 3 })],
  ['ZeRO-1 SGD momentum', cfg({ kind: 'fsdp', stage: 1 }, { kind: 'sgd', lr: 0.05, momentum: 0.9, weightDecay: 0.01 })],
  // bf16 unsharded parameters re-gathered (cast) from the loaded float32 masters.
  ['ZeRO-2 bf16 params', cfg({ kind: 'fsdp', stage: 2, paramDtype: 'bfloat16' })],
];

interface Out {
  start: number;
  losses: number[];
  deviceStaging?: string;
  params: Float32Array;
  paramsAtSave?: Float32Array;
}

const scratch = mkdtempSync(join(tmpdir(), 'ckpt-device-resume-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
const dirOf = (i: number) => join(scratch, `case${i}`);

async function device(runs: DeviceRun[]): Promise<Out[]> {
  const out = await runRanks<(Omit<Out, 'params' | 'paramsAtSave'> & { numel: number; hasAtSave: boolean })[]>(WORKER, 2, { payload: { mode: 'device', runs } satisfies Payload, check: true, timeoutMs: 170_000 });
  const blob = out[0]!.arrays!;
  let off = 0;
  const take = (n: number) => blob.subarray(off, (off += n));
  return out[0]!.result!.map((r) => ({ ...r, params: take(r.numel), ...(r.hasAtSave ? { paramsAtSave: take(r.numel) } : {}) }));
}

const bytes = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

let straight: Out[], saved: Out[], resumed: Out[];
let host: { result: { step: number; optimizerStep: number; momentMass: number }; params: Float32Array };

beforeAll(async () => {
  Object.assign(process.env, standinEnv());
  const first = await device(CASES.flatMap(([, c], i) => [{ cfg: c }, { cfg: c, saveAt: { step: K, dir: dirOf(i) } }]));
  straight = first.filter((_, j) => j % 2 === 0);
  saved = first.filter((_, j) => j % 2 === 1);
  resumed = await device(CASES.map(([, c], i) => ({ cfg: c, from: dirOf(i) })));
  const zero3 = CASES.findIndex(([name]) => name === 'ZeRO-3');
  const h = await runRanks<{ step: number; optimizerStep: number; momentMass: number }>(WORKER, 3, { payload: { mode: 'host', cfg: CASES[zero3]![1], from: dirOf(zero3) } satisfies Payload, check: true, timeoutMs: 60_000 });
  host = { result: h[0]!.result!, params: h[0]!.arrays! };
}, 300_000);

describe('device DDP / FSDP checkpoints (2 ranks, NCCL stand-ins, DeviceBuffers)', () => {
  CASES.forEach(([name], i) => {
    it(`${name}: save at step ${K} and go on to ${N} == ${N} straight steps, bit for bit`, () => {
      expect(saved[i]!.deviceStaging).toBe('host'); // no libcufile: device -> pinned host snapshot
      expect(saved[i]!.losses).toEqual(straight[i]!.losses);
      expect(bytes(saved[i]!.params).equals(bytes(straight[i]!.params))).toBe(true);
    });

    it(`${name}: a fresh job loads step ${K} and continues to ${N} == straight, bit for bit`, () => {
      const r = resumed[i]!;
      expect(r.start).toBe(K);
      expect(r.losses).toEqual(straight[i]!.losses.slice(K));
      expect(bytes(r.params).equals(bytes(straight[i]!.params))).toBe(true);
      // The run really moved after the checkpoint (a resumed run that ignored the load would differ anyway).
      expect(bytes(saved[i]!.paramsAtSave!).equals(bytes(r.params))).toBe(false);
    });
  });

  it('a device ZeRO-3 checkpoint loads into the host Gloo DDP at 3 ranks: the saved parameters, bit for bit', async () => {
    const zero3 = CASES.findIndex(([name]) => name === 'ZeRO-3');
    const z = saved[zero3]!;
    // Per-parameter tensors with the model's shapes and the optimizer step, as the host path writes them.
    const m = await readManifest((await latest(dirOf(zero3)))!);
    expect(m.tensors['embed.tok']!.globalShape).toEqual([MODEL.vocab, MODEL.dim]);
    expect(m.tensors['block1.w2.exp_avg_sq']!.globalShape).toEqual([MODEL.hidden, MODEL.dim]);
    expect(m.train.optimizerStep).toBe(K);
    expect(host.result.step).toBe(K);
    expect(host.result.optimizerStep).toBe(K);
    expect(host.result.momentMass).toBeGreaterThan(0);
    expect(bytes(host.params).equals(bytes(z.paramsAtSave!))).toBe(true);
  });
});
