/**
 * One rank of the calibration's all-reduce sweep (started by ./calibrate.ts under the
 * gang launcher): `nccl-node bench`'s sweep in-process, rank 0 writes the rows as JSON.
 *   calibrate-rank.ts --out FILE --min BYTES --max BYTES --iters N --warmup N [--backend gloo|nccl|auto]
 */
import { writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { init } from '../comm/init.js';
import { allReduceSweep } from '../nccl-tests/sweep.js';

const { values: a } = parseArgs({
  options: { out: { type: 'string' }, min: { type: 'string' }, max: { type: 'string' }, iters: { type: 'string' }, warmup: { type: 'string' }, timeout: { type: 'string' }, backend: { type: 'string', default: 'gloo' } },
});
const comm = await init({ backend: a.backend as 'gloo' | 'nccl' | 'auto', timeoutMs: Number(a.timeout ?? 120_000) });
try {
  const sweep = await allReduceSweep(comm, { minBytes: Number(a.min), maxBytes: Number(a.max), iters: Number(a.iters), warmup: Number(a.warmup) });
  if (comm.rank === 0) await writeFile(a.out!, JSON.stringify({ ranks: comm.size, backend: comm.backend, errors: sweep.errors, rows: sweep.rows }));
} finally {
  await comm.destroy();
}
