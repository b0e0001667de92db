/**
 * The TypeScript part of the call path, this checkout against another, in one process:
 * a 4-byte all-reduce at 1 rank through this checkout's Communicator, through the other
 * checkout's (`--against`, e.g. a `git worktree` of the previous commit, with
 * node_modules and build linked from this one), and straight through the native
 * communicator (no TypeScript layer: what the layer adds). One process, one addon,
 * three native communicators; the sides alternate in blocks, so that the host's fast
 * and slow phases (bench/README.md) fall on all of them alike. Per block: the median
 * awaited call, and the time per call of 64 issued together then awaited (queued); per
 * side the median over blocks, and this checkout's blocks as ratios to the other's
 * neighbouring block. A benchmark, not a test; table and JSON.
 *
 *   node --import tsx bench/comm/callpath-ab.ts --against ../old-checkout [--blocks 30]
 *        [--calls 2000] [--json out.json]
 */
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { DTYPE_CODE, REDUCE_OP_CODE } from '../../src/dtypes.js';
import { binding, OpKind, type NativeComm } from '../../src/native.js';
import { Communicator } from '../../src/comm/communicator.js';
import { StoreServer } from '../../src/rendezvous/server.js';
import { median } from '../stats.js';

const arg = (name: string, def: string): string => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1]! : def;
};
const AGAINST = arg('--against', '');
const BLOCKS = Number(arg('--blocks', '30'));
const CALLS = Number(arg('--calls', '2000'));
const QUEUE = 64;
if (!AGAINST) throw new Error('--against <path of another checkout> is required');

interface Side { allReduce(buf: Float32Array): PromiseLike<unknown> }

const token = 'callpath-ab';
const server = await StoreServer.start({ host: '127.0.0.1', port: 0, token });
const nativeComm = async (prefix: string): Promise<NativeComm> => binding().createGloo({
  rank: 0, size: 1, storeHost: '127.0.0.1', storePort: server.port, token, prefix, hostname: '127.0.0.1',
  timeoutMs: 30_000, checkAgreement: true,
});
// As init() builds the world communicator: with a failure explanation (a promise step on failure only).
const explainFailure = async (err: unknown): Promise<unknown> => err;
const other = (await import(pathToFileURL(resolve(AGAINST, 'src/comm/communicator.ts')).href)) as { Communicator: typeof Communicator };
const thisComm = new Communicator({ native: await nativeComm('ab/this/'), timeoutMs: 30_000, explainFailure });
const againstComm = new other.Communicator({ native: await nativeComm('ab/against/'), timeoutMs: 30_000, explainFailure });
const raw = await nativeComm('ab/native/');
const sides: Record<'this' | 'against' | 'native', Side> = {
  this: thisComm,
  against: againstComm,
  native: { allReduce: (b) => raw.submit(OpKind.allReduce, DTYPE_CODE.float32, REDUCE_OP_CODE.sum, b, b, b.length, -1, 30_000) },
};

const buf = new Float32Array(1).fill(1);
async function awaited(side: Side): Promise<number> {
  const us = new Float64Array(CALLS);
  for (let i = 0; i < CALLS; i++) {
    const t0 = performance.now();
    await side.allReduce(buf);
    us[i] = (performance.now() - t0) * 1000;
  }
  return median(us);
}
async function queued(side: Side): Promise<number> {
  const works = new Array<PromiseLike<unknown>>(QUEUE);
  const t0 = performance.now();
  for (let i = 0; i < QUEUE; i++) works[i] = side.allReduce(buf);
  await Promise.all(works);
  return ((performance.now() - t0) * 1000) / QUEUE;
}

const names = Object.keys(sides) as (keyof typeof sides)[];
for (let i = 0; i < 5; i++) for (const n of names) await awaited(sides[n]); // the JIT
const blocks: Record<string, { awaitedUs: number[]; queuedUs: number[] }> = Object.fromEntries(names.map((n) => [n, { awaitedUs: [], queuedUs: [] }]));
for (let b = 0; b < BLOCKS; b++) {
  for (const n of names) {
    blocks[n]!.awaitedUs.push(await awaited(sides[n]));
    const q: number[] = [];
    for (let i = 0; i < 8; i++) q.push(await queued(sides[n]));
    blocks[n]!.queuedUs.push(median(q));
  }
}
const ratio = (mode: 'awaitedUs' | 'queuedUs') => blocks.this![mode].map((x, i) => x / blocks.against![mode][i]!);
const r2 = (x: number) => Number(x.toFixed(2));
const rows = names.map((n) => ({ side: n, awaitedUs: r2(median(blocks[n]!.awaitedUs)), queuedUs: r2(median(blocks[n]!.queuedUs)) }));
const ratios = {
  awaited: { median: r2(median(ratio('awaitedUs'))), min: r2(Math.min(...ratio('awaitedUs'))), max: r2(Math.max(...ratio('awaitedUs'))) },
  queued: { median: r2(median(ratio('queuedUs'))), min: r2(Math.min(...ratio('queuedUs'))), max: r2(Math.max(...ratio('queuedUs'))) },
};
console.log(`# 4-byte float32 all-reduce at 1 rank, µs per call, median of ${BLOCKS} blocks (${CALLS} awaited, 8 x ${QUEUE} queued per block)`);
console.log(`# this: this checkout's Communicator; against: ${AGAINST}'s; native: the native communicator's submit() alone`);
console.log('| side | awaited µs | queued µs |\n|---|---|---|');
for (const r of rows) console.log(`| ${r.side} | ${r.awaitedUs} | ${r.queuedUs} |`);
console.log(`# this / against, block by block: awaited ${ratios.awaited.median} (${ratios.awaited.min}-${ratios.awaited.max}), queued ${ratios.queued.median} (${ratios.queued.min}-${ratios.queued.max})`);
const json = arg('--json', '');
if (json) writeFileSync(json, `${JSON.stringify({ bench: 'callpath-ab', node: process.version, against: AGAINST, blocks: BLOCKS, calls: CALLS, rows, ratios, perBlock: blocks }, null, 1)}\n`);
await thisComm.destroy();
await againstComm.destroy();
await raw.destroy();
await server.close();
