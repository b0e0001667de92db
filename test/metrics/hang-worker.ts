/**
 * One rank of a hang: every rank runs allReduce #0, allReduce #1 and broadcast #2; then
 * the rank named `stall` does not make call #3 (it waits instead), so the others' #3
 * times out after `timeoutMs`. The timeout dumps their traces and asks every rank for
 * its own; each rank then waits until all `size` files are in the trace directory
 * (rank 0 hosts the store the request travels through) and reports what happened.
 */
import { existsSync, readdirSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { init } from '../../src/comm/init.js';
import { readPayload, report } from '../helpers/ranks.js';

const p = readPayload<{ stall: number; timeoutMs: number }>();
const dir = process.env.NCCL_NODE_TRACE_DIR!;
process.on('warning', (w) => report({ warning: w.message }));
const comm = await init({ backend: 'gloo' });
const buf = new Float32Array(4).fill(comm.rank);
await comm.allReduce(buf);
await comm.allReduce(buf);
await comm.broadcast(new Float32Array(8), { root: 1 });

// Ranks with a finished dump: a dump is written to <name>.tmp and renamed, so a .tmp (of a
// first dump, or of a later one replacing it) must not count.
const allDumped = (): boolean => existsSync(dir)
  && new Set(readdirSync(dir).flatMap((f) => /^nccl-node-trace-rank(\d+)-\d+\.json$/.exec(f)?.[1] ?? [])).size >= comm.size;
let error: string | null = null;
let message: string | null = null;
if (comm.rank !== p.stall) {
  try {
    await comm.allReduce(buf, { timeoutMs: p.timeoutMs });
  } catch (err) {
    error = (err as { code?: string }).code ?? String(err);
    message = (err as Error).message;
  }
}
const deadline = Date.now() + 15_000;
while (!allDumped() && Date.now() < deadline) await sleep(50);
report({ rank: comm.rank, error, message, allDumped: allDumped() });
// Peers may still read the store: leave together, rank 0 (the store's host) last.
await sleep(comm.rank === 0 ? 600 : 100);
process.exit(0);
