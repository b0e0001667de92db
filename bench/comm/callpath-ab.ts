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
import { parseArgs } from 'node:util';
import { Communicator } from '../../src/comm/communicator.js';
import { median } from '../stats.js';
import { nativeAllReduce, oneRankStore } from './one-rank-native.js';

const { values: a } = parseArgs({
  options: {
    against: { type: 'string' },
    blocks: { type: 'string', default: '30' },
    calls: { type: 'string', default: '2000' },
    json: { type: 'string' },
  },
});
if (!a.against) throw new Error('--against <path of another checkout> is required');
const AGAINST = a.against;
const BLOCKS = Number(a.blocks);
const CALLS = Number(a.calls);
const QUEUE = 64;

interface Side { allReduce(buf: Float32Array): PromiseLike<unknown> | undefined }

const store = await oneRankStore('callpath-ab');
// As init() builds the world communicator: with a failure explanation (a promise step on failure only).
const explainFailure = async (err: unknown): Promise<unknown> => err;
const other = (await import(pathToFileURL(resolve(AGAINST, 'src/comm/communicator.ts')).href)) as { Communicator: typeof Communicator };
const thisComm = new Communicator({ native: await store.open('ab/this/'), timeoutMs: 30_000, explainFailure });
const againstComm = new other.Communicator({ native: await store.open('ab/against/'), timeoutMs: 30_000, explainFailure });
const raw = await store.open('ab/native/');
const sides: Record<'this' | 'against' | 'native', Side> = {
  this: thisComm,
  against: againstComm,
  native: { allReduce: (b) => nativeAllReduce(raw, b) },
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
  const works = new Array<PromiseLike<unknown> | undefined>(QUEUE);
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
const r2 = (x: number) => Number(x.toFixed(2));
const ratio = (mode: 'awaitedUs' | 'queuedUs') => {
  const rs = blocks.this![mode].map((x, i) => x / blocks.against![mode][i]!);
  return { median: r2(median(rs)), min: r2(Math.min(...rs)), max: r2(Math.max(...rs)) };
};
const rows = names.map((n) => ({ side: n, awaitedUs: r2(median(blocks[n]!.awaitedUs)), queuedUs: r2(median(blocks[n]!.queuedUs)) }));
const ratios = { awaited: ratio('awaitedUs'), queued: ratio('queuedUs') };
console.log(`# 4-byte float32 all-reduce at 1 rank, µs per call, median of ${BLOCKS} blocks (${CALLS} awaited, 8 x ${QUEUE} queued per block)`);
console.log(`# this: this checkout's Communicator; against: ${AGAINST}'s; native: the native communicator's submit() alone`);
console.log('| side | awaited µs | queued µs |\n|---|---|---|');
for (const r of rows) console.log(`| ${r.side} | ${r.awaitedUs} | ${r.queuedUs} |`);
console.log(`# this / against, block by block: awaited ${ratios.awaited.median} (${ratios.awaited.min}-${ratios.awaited.max}), queued ${ratios.queued.median} (${ratios.queued.min}-${ratios.queued.max})`);
if (a.json) writeFileSync(a.json, `${JSON.stringify({ bench: 'callpath-ab', node: process.version, against: AGAINST, blocks: BLOCKS, calls: CALLS, rows, ratios, perBlock: blocks }, null, 1)}\n`);
await thisComm.destroy();
await againstComm.destroy();
await raw.destroy();
await store.close();
