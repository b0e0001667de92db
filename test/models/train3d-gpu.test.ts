/**
 * 3D training on the device storage: train3d with device 'cuda' through
 * init({backend: 'nccl'}) on the stand-in libcuda/libnccl (test/gpu/helpers.ts;
 * real GPUs run the same code). On the device: the parameters, gradients and
 * AdamW state in DeviceBuffers; the dp all-reduce (ZeRO: reduce-scatter and
 * all-gathers), the sums of squares, clipping and the AdamW step as NCCL
 * collectives and kernels; the tp all-reduces / reduce-scatters / all-gathers and
 * the pipeline's send/recv as NCCL operations on DeviceBuffers. On the host: the
 * GPT's layers, on a mirror of the stage's parameters (models/gpt/device-gpt.ts).
 *
 * Each layout, over 5 steps, matches the single-process reference of
 * train3d.test.ts (losses, gradient norms, final parameters reassembled from
 * every rank's shards) to float32 rounding, and the Gloo run of the same layout
 * on host arrays bit for bit, with the same memory accounting.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { standinEnv } from '../gpu/helpers.js';
import { describeRanks, runRanks, type RankResult } from '../helpers/ranks.js';
import { assemble, BATCH, batchesFor, CFG, CLIP, expectNear, LR, MICRO, reference, WD, type Out } from './train3d-reference.js';

const STEPS = 5;
const batches = batchesFor(STEPS);
const WORKER = 'test/models/train3d-worker.ts';
// The stand-in libcuda logs the size of every device-to-host copy here (one file per rank process).
const DTOH_TRACE = join(mkdtempSync(join(tmpdir(), 'nccl-node-3d-dtoh-')), 'trace');

type GpuOut = Out & { stepDtoHMax: number | null; dtohMax: number | null };

function launch(world: number, layout: Record<string, unknown>, device: 'cpu' | 'cuda'): Promise<RankResult<GpuOut>[]> {
  return runRanks<GpuOut>(WORKER, world, {
    env: device === 'cuda' || layout.backend === 'nccl' ? standinEnv({ CUDA_STANDIN_DTOH_TRACE: DTOH_TRACE }) : {},
    timeoutMs: 60_000,
    payload: { model: CFG, steps: STEPS, globalBatch: BATCH, micro: MICRO, schedule: '1f1b', optimizer: { kind: 'adamw', lr: LR, weightDecay: WD }, clipNorm: CLIP, batches, device, ...layout },
  });
}

async function run(world: number, layout: Record<string, unknown>, device: 'cpu' | 'cuda'): Promise<RankResult<GpuOut>[]> {
  const ranks = await launch(world, layout, device);
  expect(ranks.every((x) => x.code === 0), describeRanks(ranks)).toBe(true);
  return ranks;
}

const LAYOUTS: Array<[number, { mesh: { dp: number; tp: number; pp: number }; zero?: number; sequenceParallel?: boolean; hsdp?: { replicate: number } }]> = [
  [2, { mesh: { dp: 2, tp: 1, pp: 1 }, zero: 3 }],
  [2, { mesh: { dp: 1, tp: 2, pp: 1 }, sequenceParallel: true }],
  [2, { mesh: { dp: 1, tp: 1, pp: 2 } }],
  [4, { mesh: { dp: 2, tp: 1, pp: 2 }, zero: 2 }],
  [4, { mesh: { dp: 2, tp: 2, pp: 1 }, zero: 1 }],
  [4, { mesh: { dp: 4, tp: 1, pp: 1 }, zero: 1, hsdp: { replicate: 2 } }],
];

describe('train3d on the device storage over NCCL (stand-ins)', { timeout: 60_000 }, () => {
  const ref = reference(batches);
  for (const [world, layout] of LAYOUTS) {
    const { dp, tp, pp } = layout.mesh;
    const name = `(dp, tp, pp) = (${dp}, ${tp}, ${pp})${layout.zero ? ` with ZeRO-${layout.zero} on dp` : ''}${layout.sequenceParallel ? ', sequence parallel' : ''}${layout.hsdp ? `, HSDP replicate ${layout.hsdp.replicate}` : ''}`;
    it(`${name}: ${STEPS} steps equal one process, and the Gloo run bit for bit`, async () => {
      const want = await ref;
      const gpu = await run(world, layout, 'cuda');
      for (const x of gpu) {
        // The dp reduction, norm, clipping and AdamW step stay on the device: nothing larger than a
        // float64 scalar comes back to the host there, while the host mirror's pulls are traced whole.
        expect(x.result!.stepDtoHMax, 'device-to-host bytes in one copy during reduce + norm + step').toBeLessThanOrEqual(8);
        expect(x.result!.dtohMax, 'the largest device-to-host copy of the run (a parameter into the host mirror)').toBeGreaterThan(8);
        for (let s = 0; s < STEPS; s++) {
          expect(x.result!.losses[s]).toBeCloseTo(want.losses[s]!, 5);
          expect(x.result!.norms[s]! / want.norms[s]!).toBeCloseTo(1, 4);
        }
      }
      expect(want.norms[0]).toBeGreaterThan(CLIP); // clipping was active
      expectNear(assemble(gpu as never, want.data), want.data);

      const host = await run(world, layout, 'cpu');
      gpu.forEach((x, r) => {
        const h = host[r]!;
        expect(x.result!.losses, `rank ${r} losses`).toEqual(h.result!.losses);
        expect(x.result!.norms, `rank ${r} norms`).toEqual(h.result!.norms);
        expect(x.result!.memory, `rank ${r} memory`).toEqual(h.result!.memory);
        expect(x.result!.resident).toBe(h.result!.resident);
        expect(Buffer.from(x.arrays!.buffer).equals(Buffer.from(h.arrays!.buffer)), `rank ${r} parameters`).toBe(true);
      });
    });
  }

  it('the device must fit the world: cuda on NCCL, cpu on Gloo (ERR_INVALID_ARGUMENT); no checkpoints on the device (ERR_UNAVAILABLE)', async () => {
    const mesh = { dp: 1, tp: 1, pp: 1 };
    const failure = async (layout: Record<string, unknown>, device: 'cpu' | 'cuda'): Promise<string> => {
      const [x] = await launch(1, { mesh, ...layout }, device);
      expect(x!.code, x!.stderr).not.toBe(0);
      return x!.stderr;
    };
    expect(await failure({ backend: 'gloo' }, 'cuda')).toMatch(/ERR_INVALID_ARGUMENT[^]*device 'cuda' does not fit a gloo world|device 'cuda' does not fit a gloo world[^]*ERR_INVALID_ARGUMENT/);
    expect(await failure({ backend: 'nccl' }, 'cpu')).toMatch(/ERR_INVALID_ARGUMENT[^]*device 'cpu' does not fit a nccl world|device 'cpu' does not fit a nccl world[^]*ERR_INVALID_ARGUMENT/);
    expect(await failure({ ckpt: { from: '/nonexistent' } }, 'cuda')).toMatch(/ERR_UNAVAILABLE[^]*checkpoints are written from host storage|checkpoints are written from host storage[^]*ERR_UNAVAILABLE/);
  });
});
