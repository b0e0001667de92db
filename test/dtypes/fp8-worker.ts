// One rank of the fp8 reduction test: rank 0 holds every fp8 code 256 times over,
// rank 1 each code 256 times in a row, so one all-reduce combines all 65536 pairs.
// BACKEND=gloo uses host arrays, BACKEND=nccl DeviceBuffers on the stand-ins.
import { DeviceBuffer, init, type DType, type ReduceOp } from '../../src/index.js';
import { report } from '../helpers/ranks.js';

const comm = await init({ backend: process.env.BACKEND as 'gloo' | 'nccl' });
const pairs = new Uint8Array(65536);
for (let p = 0; p < pairs.length; p++) pairs[p] = comm.rank === 0 ? p >> 8 : p & 0xff;
const out: Record<string, string> = {};
for (const dtype of ['float8e4m3', 'float8e5m2'] as DType[]) {
  for (const op of ['sum', 'prod', 'max', 'min'] as ReduceOp[]) {
    let result: Uint8Array;
    if (comm.backend === 'nccl') {
      const buf = await DeviceBuffer.from(pairs, { dtype });
      await comm.allReduce(buf, { op });
      result = (await buf.toHost()) as Uint8Array;
    } else {
      result = pairs.slice();
      await comm.allReduce(result, { op, dtype });
    }
    out[`${dtype}/${op}`] = Buffer.from(result).toString('base64');
  }
}
report({ rank: comm.rank, results: out });
await comm.destroy();
