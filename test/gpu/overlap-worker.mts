// One rank of test/gpu/overlap.test.ts: two all-reduces issued back to back on the
// NCCL stand-in, whose collectives each occupy the stream for NCCL_STANDIN_RUN_US.
// Reports both ops' outcomes, flight-record entries (launch and completion times) and
// results. Prints one line: RESULT <json>.
import { readFileSync } from 'node:fs';
import { DeviceBuffer, dumpFlightRecords, init } from '../../src/index.js';

const rank = Number(process.env.RANK);
const n = Number(process.env.WORLD_SIZE);

const comm = await init({ backend: 'nccl', timeoutMs: Number(process.env[`OP_TIMEOUT_MS_RANK${rank}`] ?? 20000) });
try {
  const a = await DeviceBuffer.from(new Float32Array([rank + 1, 1]));
  const b = await DeviceBuffer.from(new Float32Array([10 * (rank + 1), 2]));
  const first = comm.allReduce(a);
  const second = comm.allReduce(b);
  const outcomes = await Promise.all([first, second].map((w) => Promise.resolve(w).then(
    () => 'ok', (err: { code?: string; message: string }) => ({ code: err.code, message: err.message }))));
  const sum = (f: (r: number) => number) => Array.from({ length: n }, (_, r) => f(r)).reduce((x, y) => x + y, 0);
  if (comm.state !== 'ok') {
    const record = JSON.parse(readFileSync(dumpFlightRecords('overlap test'), 'utf8'));
    console.log(`RESULT ${JSON.stringify({ rank, outcomes, state: comm.state, entries: record.communicators[0].entries })}`);
    process.exit(0);  // the aborted communicator needs no teardown
  }
  const results = [Array.from(await a.toHost() as Float32Array), Array.from(await b.toHost() as Float32Array)];
  const expected = [[sum((r) => r + 1), n], [sum((r) => 10 * (r + 1)), 2 * n]];
  const record = JSON.parse(readFileSync(dumpFlightRecords('overlap test'), 'utf8'));
  const entries = record.communicators[0].entries.filter((e: { op: string }) => e.op === 'allReduce');
  console.log(`RESULT ${JSON.stringify({ rank, outcomes, results, expected, entries })}`);
  await comm.destroy();
} catch (err) {
  console.log(`RESULT ${JSON.stringify({ fatal: { code: (err as { code?: string }).code, message: (err as Error).message } })}`);
  comm.abort();
  process.exitCode = 1;
}
