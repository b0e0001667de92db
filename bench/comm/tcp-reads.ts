/**
 * What the TCP round reads per call (docs/gloo.md, "One read a message"): per collective
 * and size, the reads that brought data (`glooAlgoStats().tcpDataReads`) and the bytes a
 * read took beyond its message and handed back to the connection (`tcpUnreadBytes`), per
 * rank and call, averaged over the ranks, with rank 0's µs per awaited call. Each
 * all-reduce size runs next to one 4 bytes longer, whose blocks are uneven (the last rank's
 * two-round block shorter than the others'): there a rank's first read of a peer's message
 * expects its own message's length and can take more than the message. Sizes round down to
 * whole float32 elements (at least one), as in bench/comm/sweep.ts. A benchmark, not a
 * test; table and JSON.
 *
 *   NCCL_NODE_SHM=0 node --import tsx bench/comm/tcp-reads.ts [--ranks 4] [--calls 300]
 *        [--sizes 8,4K,128K,512K] [--json bench/comm/tcp-reads.json]
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../test/helpers/ranks.js';
import { gang } from '../gang.js';
import { arg, bytesOf } from '../args.js';

interface Row { coll: string; bytes: number; usPerCall: number; dataReadsPerCall: number; unreadBytesPerCall: number }

async function worker(): Promise<void> {
  const { init } = await import('../../src/index.js');
  const { binding } = await import('../../src/native.js');
  const comm = await init({ backend: 'gloo' });
  const calls = Number(process.env.TCP_READS_CALLS);
  const counters = (): [number, number] => {
    const g = binding().glooAlgoStats();
    return [g.tcpDataReads, g.tcpUnreadBytes];
  };
  const time = async (coll: string, bytes: number, call: () => Promise<unknown>): Promise<void> => {
    for (let i = 0; i < 20; i++) await call();
    await comm.barrier();
    const before = counters();
    const t0 = performance.now();
    for (let i = 0; i < calls; i++) await call();
    const us = ((performance.now() - t0) * 1000) / calls;
    const after = counters();
    // Every rank's counts, summed (the barrier and this all-reduce come after `after`).
    const sum = new Float64Array([after[0] - before[0], after[1] - before[1]]);
    await comm.allReduce(sum);
    const per = (x: number): number => Number((x / calls / comm.size).toFixed(2));
    const row: Row = { coll, bytes, usPerCall: Number(us.toFixed(1)), dataReadsPerCall: per(sum[0]!), unreadBytesPerCall: per(sum[1]!) };
    if (comm.rank === 0) process.stdout.write(`${JSON.stringify(row)}\n`);
  };
  for (const size of process.env.TCP_READS_SIZES!.split(',').map(Number)) {
    for (const bytes of [size, size + 4]) {
      const a = new Float32Array(Math.max(1, Math.floor(bytes / 4))).fill(1);
      await time('allreduce', bytes, () => comm.allReduce(a));
    }
    const b = new Float32Array(Math.max(1, Math.floor(size / 4))).fill(1);
    await time('broadcast', size, () => comm.broadcast(b, { root: 0 }));
  }
  await comm.destroy();
}

async function main(): Promise<void> {
  const ranks = Number(arg('--ranks', '4'));
  const calls = Number(arg('--calls', '300'));
  const sizes = arg('--sizes', '8,4K,128K,512K').split(',').map(bytesOf);
  const out = arg('--json', fileURLToPath(new URL('./tcp-reads.json', import.meta.url)));
  if (process.env.NCCL_NODE_SHM !== '0') throw new Error('tcp-reads measures the TCP round: run it with NCCL_NODE_SHM=0');
  const port = await freePort();
  const self = fileURLToPath(import.meta.url);
  const rows = await gang<Row>(ranks, (rank) => [process.execPath, ['--import', 'tsx', self], {
    ...process.env, TCP_READS_WORKER: '1', TCP_READS_CALLS: String(calls), TCP_READS_SIZES: sizes.join(','),
    RANK: String(rank), LOCAL_RANK: String(rank), WORLD_SIZE: String(ranks), MASTER_ADDR: '127.0.0.1',
    MASTER_PORT: String(port), NCCL_NODE_TOKEN: 'tcp-reads',
  }]);
  console.log(`# TCP round reads, ${ranks} ranks, ${calls} awaited calls a row; per rank and call, averaged over the ranks`);
  console.table(rows);
  writeFileSync(out, `${JSON.stringify({ bench: 'tcp-reads', ranks, calls, node: process.version, rows }, null, 1)}\n`);
  console.log(`wrote ${out}`);
}

await (process.env.TCP_READS_WORKER === '1' ? worker() : main());
