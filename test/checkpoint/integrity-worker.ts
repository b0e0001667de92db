/** One rank: saves integrityState for each step in STEPS into CKPT_DIR (4 KiB CRC chunks). */
import { init } from '../../src/comm/init.js';
import { Checkpointer, flatShard } from '../../src/checkpoint/index.js';
import { report } from '../helpers/ranks.js';
import { BIG_N, bigOf, integrityState } from './integrity-fixture.js';

const comm = await init();
const ck = await Checkpointer.create(process.env.CKPT_DIR!, { comm, keep: 0, write: { chunkBytes: 4096 } });
for (const step of (process.env.STEPS ?? '1').split(',').map(Number)) {
  const state = integrityState(comm.rank, comm.size, step);
  // BIG=1: a 16 MiB tensor more, so a load's reads of one shard outlast another shard's failure.
  const shard = Math.ceil(BIG_N / comm.size);
  if (process.env.BIG) state.tensors.big = flatShard(bigOf(step).subarray(comm.rank * shard), BIG_N, comm.rank, comm.size);
  const info = await (await ck.save(state)).committed;
  report({ rank: comm.rank, step, dir: info.dir });
}
await ck.close();
await comm.destroy();
