/**
 * One rank of the GPU-path correctness runs (gpu.test.ts): init() on NCCL (the
 * stand-ins in CI), then each config of the payload through trainOnDevice.
 */
import { init } from '../../src/comm/init.js';
import type { TrainConfig } from '../../examples/train.js';
import { trainOnDevice } from './gpu-train.js';
import { concat } from './helpers.js';
import { readPayload, writeResult } from './rank-io.js';

const { runs } = readPayload<{ runs: TrainConfig[] }>();
const comm = await init({ backend: 'nccl' });
if (comm.backend !== 'nccl') throw new Error(`expected the NCCL backend, got ${comm.backend}`);
const results = [];
const params: Float32Array[] = [];
for (const cfg of runs) {
  const r = await trainOnDevice(comm, cfg);
  results.push({ losses: r.losses, gradNorms: r.gradNorms, memory: r.dp.memory(), stepDtoHMax: r.stepDtoHMax });
  params.push(concat(r.params));
}
writeResult(results, comm.rank === 0 ? concat(params) : undefined);
await comm.destroy();
