/** One rank: saves the fixture state for each step in STEPS (comma list) into CKPT_DIR, async. */
import { init } from '../../src/comm/init.js';
import { Checkpointer } from '../../src/checkpoint/index.js';
import { report } from '../helpers/ranks.js';
import { stateFor } from './fixture.js';

const comm = await init();
const ck = await Checkpointer.create(process.env.CKPT_DIR!, { comm, keep: Number(process.env.CKPT_KEEP ?? 3) });
for (const step of (process.env.STEPS ?? '1').split(',').map(Number)) {
  const h = await ck.save(stateFor(comm.rank, comm.size, step), { async: true });
  const info = await h.committed;
  report({ rank: comm.rank, step, stallMs: h.stallMs, bytes: info.bytes, direct: info.direct });
}
await ck.close();
await comm.destroy();
