/**
 * One rank of correctness runs: trains each config of the payload in turn (one
 * process start and JIT warm-up for all of them) and reports losses, norms and
 * memory, plus rank 0's final parameters of every run concatenated.
 */
import { init } from '../../src/comm/init.js';
import { train, type TrainConfig } from '../../src/train/loop.js';
import { concat } from './helpers.js';
import { readPayload, writeResult } from '../helpers/ranks.js';

const { runs } = readPayload<{ runs: TrainConfig[] }>();
// Host storage on Gloo even where the NCCL libraries (or their stand-ins) are present.
const comm = await init({ backend: 'gloo' });
const results = [];
const params: Float32Array[] = [];
for (const cfg of runs) {
  const r = await train(comm, cfg);
  results.push({ losses: r.losses, gradNorms: r.gradNorms, memory: r.dp.memory(), stepMs: r.stepMs });
  params.push(concat(r.params));
}
writeResult(results, comm.rank === 0 ? concat(params) : undefined);
await comm.destroy();
