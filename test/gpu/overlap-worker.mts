// One rank of test/gpu/overlap.test.ts: two all-reduces issued back to back on the
// NCCL stand-in, whose collectives each occupy the stream for NCCL_STANDIN_RUN_US.
// Reports both ops' flight-record entries (launch and completion times) and whether
// the results are right. Prints one line: RESULT <json>.
import { readFileSync } from 'node:fs';
import { DeviceBuffer, dumpFlightRecords, init } from '../../src/index.js';

const rank = Number(process.env.RANK);
const n = Number(process.env.WORLD_SIZE);

const comm = await init({ backend: 'nccl', timeoutMs: 20000 });
try {
  const a = await DeviceBuffer.from(new Float32Array([rank + 1, 1]));
  const b = await DeviceBuffer.from(new Float32Array([10 * (rank + 1), 2]));
  const first = comm.allReduce(a);
  const second = comm.allReduce(b);
  await Promise.all([first, second]);
  const sum = (f: (r: number) => number) => Array.from({ length: n }, (_, r) => f(r)).reduce((x, y) => x + y, 0);
  const results = [Array.from(await a.toHost() as Float32Array), Array.from(await b.toHost() as Float32Array)];
  const expected = [[sum((r) => r + 1), n], [sum((r) => 10 * (r + 1)), 2 * n]];
  const record = JSON.parse(readFileSync(dumpFlightRecords('overlap test'), 'utf8'));
  const entries = record.communicators[0].entries.filter((e: { op: string }) => e.op === 'allReduce');
  console.log(`RESULT ${JSON.stringify({ rank, results, expected, entries })}`);
  await comm.destroy();
} catch (err) {
  console.log(`RESULT ${JSON.stringify({ fatal: { code: (err as { code?: string }).code, message: (err as Error).message } })}`);
  comm.abort();
  process.exitCode = 1;
}
