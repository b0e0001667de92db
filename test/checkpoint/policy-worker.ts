/**
 * One rank of the save-policy test: a Checkpointer with the default policy (Daly's
 * interval after a first save) walks steps 1..STEPS, saving a tiny state whenever
 * shouldSave() says so; after the first save each rank feeds its own costs
 * (STALL_S / STEP_S of this rank) and reports the interval and the steps it saved.
 */
import { init } from '../../src/comm/init.js';
import { Checkpointer } from '../../src/checkpoint/index.js';
import { readPayload, report } from '../helpers/ranks.js';

const p = readPayload<{ dir: string; steps: number; mtbfHours: number; costs: { stallSeconds: number; stepSeconds: number }[]; backend?: 'gloo' | 'nccl' }>();
const comm = await init({ backend: p.backend ?? 'gloo', timeoutMs: 60_000 });
const ck = await Checkpointer.create(p.dir, { comm, keep: 0, policy: { mtbfHours: p.mtbfHours } });
const saved: number[] = [];
let interval: unknown = null;
for (let step = 1; step <= p.steps; step++) {
  if (!ck.shouldSave(step, { last: step === p.steps })) continue;
  const data = new Float32Array([comm.rank, step]);
  await ck.save({ tensors: { x: { data, globalShape: [2 * comm.size], offset: 2 * comm.rank } }, train: { step } }, { async: false });
  saved.push(step);
  if (ck.needsSaveCost) interval = await ck.recordSaveCost(p.costs[comm.rank]!);
}
await ck.close();
report({ rank: comm.rank, saved, interval });
await comm.destroy();
