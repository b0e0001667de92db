/**
 * One rank of the GPU-path correctness runs (gpu.test.ts): init() on NCCL (the
 * stand-ins in CI), then each config of the payload through src/train/loop.ts's
 * loop on the device runtime (device: 'cuda').
 */
import { existsSync, readFileSync } from 'node:fs';
import { init } from '../../src/comm/init.js';
import { train, type TrainConfig } from '../../src/train/loop.js';
import { concat } from './helpers.js';
import { readPayload, writeResult } from '../helpers/ranks.js';

/**
 * Sizes of the device-to-host copies made from now until the returned function is
 * called, from the stand-in libcuda's trace (CUDA_STANDIN_DTOH_TRACE); [] without it.
 */
function dtohTrace(): () => number[] {
  const base = process.env.CUDA_STANDIN_DTOH_TRACE;
  if (!base) return () => [];
  const file = `${base}.${process.pid}`;
  const read = () => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean).map(Number) : []);
  const before = read().length;
  return () => read().slice(before);
}

const { runs } = readPayload<{ runs: TrainConfig[] }>();
const comm = await init({ backend: 'nccl' });
if (comm.backend !== 'nccl') throw new Error(`expected the NCCL backend, got ${comm.backend}`);
const results = [];
const params: Float32Array[] = [];
for (const cfg of runs) {
  let stepDtoHMax = 0; // the largest device-to-host copy of finish + clip + step
  const r = await train(comm, {
    ...cfg,
    device: 'cuda',
    traceStep: () => {
      const traced = dtohTrace();
      return () => void (stepDtoHMax = Math.max(stepDtoHMax, ...traced()));
    },
  });
  results.push({ losses: r.losses, gradNorms: r.gradNorms, memory: r.dp.memory(), stepDtoHMax });
  params.push(concat(r.params));
}
writeResult(results, comm.rank === 0 ? concat(params) : undefined);
await comm.destroy();
