/**
 * The blocking all-reduce on one array, one rank (no exchange: the call alone), three ways
 * in alternating blocks in one process: allReduceSync repeated on the same array (prepared
 * from its second call, src/comm/repeated-calls.ts), allReduceSync with every call checked
 * and built anew (a communicator made with NCCL_NODE_PREPARE_REPEATED=0), and the same call
 * prepared once (prepareAllReduce, run()). Median µs per call over the blocks, the ratios,
 * a table and JSON. The 2-rank figures, with the round between ranks and Open MPI beside
 * them, are bench/shm/allreduce.ts's shmSync, shmSyncFull and shmPrepared columns.
 *
 *   node --import tsx bench/comm/sync-repeat.ts [--blocks 7] [--calls 200000] [--elems 2] [--json out.json]
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { init } from '../../src/index.js';
import { median } from '../stats.js';

const { values: a } = parseArgs({
  options: {
    blocks: { type: 'string', default: '7' },
    calls: { type: 'string', default: '200000' },
    elems: { type: 'string', default: '2' },
    json: { type: 'string' },
  },
});
const BLOCKS = Number(a.blocks);
const CALLS = Number(a.calls);
const ELEMS = Number(a.elems);

const repeatedComm = await init({ backend: 'gloo', rank: 0, worldSize: 1, token: 'sync-repeat' });
process.env.NCCL_NODE_PREPARE_REPEATED = '0';
const fullComm = await init({ backend: 'gloo', rank: 0, worldSize: 1, token: 'sync-repeat' });
delete process.env.NCCL_NODE_PREPARE_REPEATED;

const buf = new Float32Array(ELEMS).fill(1);
const prepared = repeatedComm.prepareAllReduce(buf);
const ways: Record<string, () => void> = {
  repeated: () => repeatedComm.allReduceSync(buf),
  full: () => fullComm.allReduceSync(buf),
  prepared: () => prepared.run(),
};
// One clock read a block: a call costs a few hundred nanoseconds here.
const block = (f: () => void): number => {
  const t0 = performance.now();
  for (let i = 0; i < CALLS; i++) f();
  return ((performance.now() - t0) * 1000) / CALLS;
};
for (const f of Object.values(ways)) block(f);  // compiled before the first timed block
const us: Record<string, number[]> = Object.fromEntries(Object.keys(ways).map((k) => [k, []]));
for (let b = 0; b < BLOCKS; b++) for (const [k, f] of Object.entries(ways)) us[k]!.push(block(f));
prepared.free();
if (repeatedComm._repeatedCalls?.prepared !== 1) throw new Error('the repeated calls were not prepared');
await repeatedComm.destroy();
await fullComm.destroy();

const med = Object.fromEntries(Object.entries(us).map(([k, v]) => [k, Number(median(v).toFixed(3))]));
const rows = Object.entries(us).map(([way, v]) => ({
  way, medianUs: med[way]!, minUs: Number(Math.min(...v).toFixed(3)), maxUs: Number(Math.max(...v).toFixed(3)),
  overFull: Number((med[way]! / med.full!).toFixed(2)), overPrepared: Number((med[way]! / med.prepared!).toFixed(2)),
}));
console.log(`# allReduceSync, 1 rank, ${ELEMS} float32, ${BLOCKS} blocks of ${CALLS} calls each way, alternating; µs per call`);
console.log('| way | median | min-max | / built anew | / prepared |');
console.log('|---|---|---|---|---|');
for (const r of rows) console.log(`| ${r.way} | ${r.medianUs} | ${r.minUs}-${r.maxUs} | ${r.overFull} | ${r.overPrepared} |`);
const doc = { bench: 'sync-repeat', node: process.version, elems: ELEMS, blocks: BLOCKS, calls: CALLS, rows, perBlock: us };
console.log(JSON.stringify(doc));
if (a.json) writeFileSync(a.json, `${JSON.stringify(doc, null, 1)}\n`);
