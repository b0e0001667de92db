/**
 * Two ranks make calls that take collective sequence numbers in every way the native
 * engine counts them (collectives, a barrier, a split, a call both ranks refuse, send and
 * recv, which take none), then call allReduce with different lengths: the agreement
 * round fails both with ERR_SIZE_MISMATCH, whose message names the native number
 * ("collective #N"). Reports those messages and the dumped trace's path.
 */
import { init } from '../../src/comm/init.js';
import { dumpTraces } from '../../src/comm/flight-record.js';
import { report } from '../helpers/ranks.js';

const comm = await init({ backend: 'gloo' });
const other = 1 - comm.rank;
await comm.allReduce(new Float32Array(4));
await comm.barrier();
try {
  comm.allGather(new Float32Array(4), new Float32Array(3)); // the wrong output length on both ranks
} catch { /* refused here, its stand-in fails on the wire */ }
const child = await comm.split({ color: 0 });
if (comm.rank === 0) await comm.send(new Float32Array(2), other);
else await comm.recv(new Float32Array(2), other);
await comm.broadcast(new Int32Array(3), { root: 1 });
let message = '';
try {
  await comm.allReduce(new Float32Array(comm.rank === 0 ? 4 : 8));
} catch (err) {
  message = `${(err as { code: string }).code}: ${(err as Error).message}`;
}
await child!.allReduce(new Float64Array(2));
const records = comm.flightRecord.json();
report({ rank: comm.rank, message, path: dumpTraces('test', process.env.NCCL_NODE_TRACE_DIR!), records });
await comm.destroy();
