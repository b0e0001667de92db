/**
 * Saves forever (world 1), continuing from the newest checkpoint in CKPT_DIR;
 * reports each commit. The test SIGKILLs it at a random moment.
 */
import { Checkpointer, latest, readManifest } from '../../src/checkpoint/index.js';
import { report } from '../helpers/ranks.js';
import { bigTensor, stateFor } from './fixture.js';

const dir = process.env.CKPT_DIR!;
const last = await latest(dir);
let step = last ? (await readManifest(last)).step + 1 : 1;
const ck = await Checkpointer.create(dir, { keep: 2 });
for (;;) {
  const s = stateFor(0, 1, step);
  s.tensors['big'] = { data: bigTensor(step), globalShape: [bigTensor.N], offset: 0 };
  const h = await ck.save(s);
  await h.committed;
  report({ committed: step });
  step++;
}
