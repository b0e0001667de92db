/**
 * How late a rank notices a peer that comes late, within a host (the shared-memory path):
 * this checkout against another. Two ranks; before each all-reduce, rank 1 computes (a
 * busy loop) for --delays microseconds, then calls; rank 0 calls at once and waits. Its
 * lateness: from rank 1's call to rank 0's return, on the host's monotonic clock (rank 1's
 * reading travels in the all-reduce itself, float64). A waiting rank first polls on the
 * calling thread (bounded, adapting), then hands the wait to the communicator's thread,
 * which spins, yields and then sleeps: what the sleep costs shows here, as in a training
 * step whose all-reduce waits for a slower rank's backward. Per cell, rank 0's median
 * (and 90th percentile) lateness per call; the checkouts alternate, each in its own pair
 * of processes, --runs times each; per side the median over runs. A benchmark, not a test; table and JSON.
 *
 *   node --import tsx bench/shm/late-peer.ts (--against ../base | --against-env NAME=VALUE) [--delays 100,500,2000,5000]
 *        [--bytes 8,1M] [--calls 200] [--runs 3] [--json out.json]
 */
import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { freePort } from '../../test/helpers/ranks.js';
import { bytesOf, sidesOf } from '../args.js';
import { gang } from '../gang.js';
import { median, quantile } from '../stats.js';

interface Comm {
  rank: number;
  barrier(): PromiseLike<unknown>;
  allReduce(b: Float64Array): PromiseLike<unknown>;
  destroy(): PromiseLike<unknown>;
}

interface Cell { bytes: number; delayUs: number; lateUs: number; p90Us: number }

if (process.env.LATE_PEER_ROOT) {
  // A rank of one pair: the checkout at LATE_PEER_ROOT.
  const m = (await import(pathToFileURL(resolve(process.env.LATE_PEER_ROOT, 'src/index.ts')).href)) as { init(o: object): Promise<Comm> };
  const comm = await m.init({ backend: 'gloo' });
  const calls = Number(process.env.LATE_PEER_CALLS);
  // CLOCK_MONOTONIC, the same in both processes of a host, in µs.
  const nowUs = (): number => Number(process.hrtime.bigint()) / 1000;
  for (const bytes of process.env.LATE_PEER_BYTES!.split(',').map(Number)) {
    // float64 sum: element 0 carries the time rank 1 called (rank 0 adds 0), the rest stay 0.
    const buf = new Float64Array(Math.max(1, bytes / 8));
    for (const delayUs of process.env.LATE_PEER_DELAYS!.split(',').map(Number)) {
      for (let i = 0; i < 20; i++) await comm.allReduce(buf);
      await comm.barrier();
      const late: number[] = [];
      for (let i = 0; i < calls; i++) {
        if (comm.rank === 1) {
          // The peer's compute, from the end of its call before.
          const from = nowUs();
          while (nowUs() - from < delayUs);
          buf[0] = nowUs();
        } else {
          buf[0] = 0;
        }
        await comm.allReduce(buf);
        if (comm.rank === 0) late.push(nowUs() - buf[0]!);
      }
      if (comm.rank === 0) {
        const cell: Cell = { bytes, delayUs, lateUs: Number(median(late).toFixed(1)), p90Us: Number(quantile(late, 0.9).toFixed(1)) };
        process.stdout.write(`${JSON.stringify(cell)}\n`);
      }
    }
  }
  await comm.destroy();
} else {
  const { values: a } = parseArgs({
    options: {
      against: { type: 'string' },
      'against-env': { type: 'string' },
      delays: { type: 'string', default: '100,500,2000,5000' },
      bytes: { type: 'string', default: '8,1M' },
      calls: { type: 'string', default: '200' },
      runs: { type: 'string', default: '3' },
      json: { type: 'string' },
    },
  });
  const self = fileURLToPath(import.meta.url);
  const { roots, env: sideEnv, against } = sidesOf('late-peer', resolve(fileURLToPath(new URL('../..', import.meta.url))),
    a.against, a['against-env']);
  const sizes = a.bytes!.split(',').map(bytesOf).join(',');
  const runs: Record<'this' | 'against', Cell[][]> = { this: [], against: [] };
  for (let run = 0; run < Number(a.runs); run++) {
    for (const side of ['against', 'this'] as const) {
      const port = await freePort();
      const cells = await gang<Cell>(2, (rank) => [process.execPath, ['--import', 'tsx', self], {
        ...process.env, NCCL_NODE_SHM: '1', LATE_PEER_ROOT: roots[side], LATE_PEER_BYTES: sizes, LATE_PEER_DELAYS: a.delays,
        LATE_PEER_CALLS: a.calls, RANK: String(rank), LOCAL_RANK: String(rank), WORLD_SIZE: '2', LOCAL_WORLD_SIZE: '2',
        MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port), NCCL_NODE_TOKEN: 'late-peer', ...sideEnv[side],
      }]);
      runs[side].push(cells);
      process.stderr.write(`run ${run + 1} ${side}: ${cells.map((c) => `${c.bytes}B/${c.delayUs}us ${c.lateUs}`).join(', ')}\n`);
    }
  }
  const rows = runs.this[0]!.map((c, i) => {
    const of = (side: 'this' | 'against', k: 'lateUs' | 'p90Us'): number => median(runs[side].map((r) => r[i]![k]));
    return {
      bytes: c.bytes, delayUs: c.delayUs, thisLateUs: of('this', 'lateUs'), againstLateUs: of('against', 'lateUs'),
      ratio: Number((of('this', 'lateUs') / of('against', 'lateUs')).toFixed(2)),
      thisP90Us: of('this', 'p90Us'), againstP90Us: of('against', 'p90Us'),
      thisRange: `${Math.min(...runs.this.map((r) => r[i]!.lateUs))}-${Math.max(...runs.this.map((r) => r[i]!.lateUs))}`,
      againstRange: `${Math.min(...runs.against.map((r) => r[i]!.lateUs))}-${Math.max(...runs.against.map((r) => r[i]!.lateUs))}`,
    };
  });
  console.log(`# all-reduce, 2 ranks through shared memory, rank 1 late by delayUs: rank 0's lateness (µs from rank 1's call to rank 0's return), this checkout against ${against}, median over ${a.runs} runs`);
  console.table(rows);
  if (a.json) writeFileSync(a.json, `${JSON.stringify({ bench: 'shm-late-peer', against, calls: Number(a.calls), runs, rows }, null, 2)}\n`);
}
