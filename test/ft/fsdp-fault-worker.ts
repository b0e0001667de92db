/**
 * FSDP ZeRO-3 (with prefetch) on 2 Gloo ranks when a peer dies mid-step: rank 1
 * SIGKILLs itself at step 1, before its forward (`at: 'forward'`) or after its first
 * unit of backward started its reduce-scatter (`at: 'backward'`). Rank 0's step fails;
 * it aborts the communicator, as a recovery does, and reports the step's error and
 * every rejection that reached the process unhandled (a gather prefetched or a
 * reduction started by FSDP that nobody awaited any more).
 */
import { init } from '../../src/comm/init.js';
import { isNcclNodeError } from '../../src/errors.js';
import { TinyLM } from '../../src/models/tiny-lm/tiny-lm.js';
import { createOptimizer, FullyShardedDataParallel } from '../../src/runtime/index.js';
import { readPayload, writeResult } from '../helpers/ranks.js';

const { at } = readPayload<{ at: 'forward' | 'backward' }>();
const unhandled: string[] = [];
process.on('unhandledRejection', (e) => unhandled.push(String((e as Error)?.message ?? e)));
const comm = await init({ backend: 'gloo', timeoutMs: 10_000 });
const model = new TinyLM({ vocab: 61, dim: 16, hidden: 37, layers: 3, seqLen: 8, seed: 5 });
const fsdp = await FullyShardedDataParallel.create(comm, model.units, createOptimizer({ kind: 'adamw', lr: 0.01 }), { stage: 3, broadcastParams: false });
const tokens = Int32Array.from({ length: 2 * 9 }, (_, i) => (i * 7 + comm.rank) % 61);
const last = model.units.length - 1;
const hooks = {
  ...fsdp.hooks,
  afterBackward: (u: number) => {
    fsdp.hooks.afterBackward!(u);
    if (comm.rank === 1 && step === 1 && at === 'backward' && u === last) process.kill(process.pid, 'SIGKILL');
  },
};
let step = 0;
let error = '';
for (; step < 2; step++) {
  if (comm.rank === 1 && step === 1 && at === 'forward') process.kill(process.pid, 'SIGKILL');
  try {
    fsdp.zeroGrad();
    await model.forwardBackward(tokens, 2, { gradScale: 1 / 16, hooks });
    await fsdp.finish();
    await fsdp.step();
  } catch (err) {
    error = isNcclNodeError(err) ? err.code : String(err);
    comm.abort();
    break;
  }
}
// Long enough for every rejection still in flight to be reported.
await new Promise((res) => setTimeout(res, 500));
writeResult({ step, error, unhandled });
process.exit(0);
