// One rank of a GPU test (spawned by helpers.ts runRanks). Runs SCENARIO on the NCCL
// backend over the stand-in libraries and prints one line: RESULT <json>.
import { readFileSync } from 'node:fs';
import {
  DeviceBuffer, allReducePreMulSum, dumpFlightRecords, dumpTraces, arrayTypeOf, bf16ToFloat, floatToBf16, floatToHalf, group, halfToFloat, init,
  type Communicator, type DType, type HostArray,
} from '../../src/index.js';

const rank = Number(process.env.RANK);
const n = Number(process.env.WORLD_SIZE);
const failures: string[] = [];

function encode(dtype: DType, values: number[]): HostArray {
  const Ctor = arrayTypeOf(dtype);
  if (dtype === 'float16') return Uint16Array.from(values, floatToHalf);
  if (dtype === 'bfloat16') return Uint16Array.from(values, floatToBf16);
  if (dtype === 'int64' || dtype === 'uint64') return new (Ctor as BigInt64ArrayConstructor)(values.map(BigInt));
  return (Ctor as Float32ArrayConstructor).from(values);
}
function decode(dtype: DType, a: HostArray): number[] {
  if (dtype === 'float16') return Array.from(a as Uint16Array, halfToFloat);
  if (dtype === 'bfloat16') return Array.from(a as Uint16Array, bf16ToFloat);
  return Array.from(a as ArrayLike<number | bigint>, Number);
}
/** Rank r's element i: small integers, exact in every dtype. */
const val = (r: number, i: number) => ((r * 5 + i * 3) % 7) + 1;
const range = <T,>(len: number, f: (i: number) => T): T[] => Array.from({ length: len }, (_, i) => f(i));
const dev = (dtype: DType, values: number[]) => DeviceBuffer.from(encode(dtype, values), { dtype });
async function expectEq(what: string, buf: DeviceBuffer, expected: number[]) {
  const got = decode(buf.dtype, await buf.toHost());
  if (JSON.stringify(got) !== JSON.stringify(expected)) failures.push(`${what}: got ${JSON.stringify(got)} expected ${JSON.stringify(expected)}`);
}

async function collectives(comm: Communicator) {
  const len = 4 * n;
  for (const dtype of ['float32', 'int32', 'bfloat16', 'float16', 'float64', 'uint8', 'int64'] as DType[]) {
    const mine = range(len, (i) => val(rank, i));
    const all = range(n, (r) => range(len, (i) => val(r, i)));
    const sum = range(len, (i) => all.reduce((s, a) => s + a[i]!, 0));
    let b = await dev(dtype, mine);
    await comm.allReduce(b); await expectEq(`${dtype} allReduce sum`, b, sum);
    b = await dev(dtype, mine);
    await comm.allReduce(b, { op: 'max' }); await expectEq(`${dtype} allReduce max`, b, range(len, (i) => Math.max(...all.map((a) => a[i]!))));
    const root = (n - 1) % n;
    b = await dev(dtype, mine);
    await comm.broadcast(b, { root }); await expectEq(`${dtype} broadcast`, b, all[root]!);
    b = await dev(dtype, mine);
    await comm.reduce(b, { root: 0 }); await expectEq(`${dtype} reduce`, b, rank === 0 ? sum : mine);
    const out = DeviceBuffer.alloc({ dtype, length: len * n });
    b = await dev(dtype, mine);
    await comm.allGather(b, out); await expectEq(`${dtype} allGather`, out, all.flat());
    const rs = DeviceBuffer.alloc({ dtype, length: len / n });
    await comm.reduceScatter(b, rs); await expectEq(`${dtype} reduceScatter`, rs, sum.slice(rank * len / n, (rank + 1) * len / n));
    const a2a = DeviceBuffer.alloc({ dtype, length: len });
    await comm.allToAll(b, a2a);
    const blk = len / n;
    await expectEq(`${dtype} allToAll`, a2a, range(len, (i) => val(Math.floor(i / blk), rank * blk + (i % blk))));
    const g = DeviceBuffer.alloc({ dtype, length: len * n });
    await comm.gather(b, rank === 1 % n ? g : null, { root: 1 % n });
    if (rank === 1 % n) await expectEq(`${dtype} gather`, g, all.flat());
    const sc = DeviceBuffer.alloc({ dtype, length: blk });
    const src = rank === 0 ? await dev(dtype, range(len, (i) => i + 1)) : null;
    await comm.scatter(src, sc, { root: 0 }); await expectEq(`${dtype} scatter`, sc, range(blk, (i) => rank * blk + i + 1));
    for (const x of [b, out, rs, a2a, g, sc]) x.dispose();
  }
  await comm.barrier();
  // Point to point: a ring exchange inside group() (would deadlock without it on real NCCL).
  const send = await dev('float32', range(8, (i) => rank * 10 + i));
  const recv = DeviceBuffer.alloc({ dtype: 'float32', length: 8 });
  await group(() => {
    comm.send(send, (rank + 1) % n);
    comm.recv(recv, (rank - 1 + n) % n);
  });
  const prev = (rank - 1 + n) % n;
  await expectEq('group ring send/recv', recv, range(8, (i) => prev * 10 + i));
  // Plain send/recv pair between 0 and 1.
  if (rank < 2) {
    const x = await dev('int32', range(5, (i) => i * (rank + 1)));
    if (rank === 0) await comm.send(x, 1); else { await comm.recv(x, 0); await expectEq('send/recv', x, range(5, (i) => i)); }
  }
  // Pre-multiplied sum: scalar * x summed over ranks.
  const pm = await dev('float32', range(4, (i) => val(rank, i)));
  await allReducePreMulSum(comm, pm, 0.5);
  await expectEq('preMulSum', pm, range(4, (i) => 0.5 * range(n, (r) => val(r, i)).reduce((s, v) => s + v, 0)));
  // Split: even and odd ranks, key reverses the order.
  const child = await comm.split({ color: rank % 2, key: -rank });
  if (child) {
    const members = range(n, (r) => r).filter((r) => r % 2 === rank % 2);
    if (child.size !== members.length) failures.push(`split size ${child.size}`);
    const expectRank = [...members].reverse().indexOf(rank);
    if (child.rank !== expectRank) failures.push(`split rank ${child.rank} expected ${expectRank}`);
    const c = await dev('float32', [rank]);
    await child.allReduce(c);
    await expectEq('split allReduce', c, [members.reduce((s, r) => s + r, 0)]);
    await group(() => { child.allReduce(c); });
  }
  // The JS flight record numbers collectives (group ends included) as the native one does.
  const collectivesOf = (c: { entries: { seq: number; op: string }[] }) =>
    c.entries.filter((e) => e.op !== 'send' && e.op !== 'recv' && e.op !== 'split').map((e) => `${e.seq}:${e.op}`).join(' ');
  const native = JSON.parse(readFileSync(dumpFlightRecords('check'), 'utf8')).communicators[0];
  const js = JSON.parse(readFileSync(dumpTraces('check'), 'utf8')).communicators.find((c: { comm: string }) => c.comm === 'world');
  if (collectivesOf(js) !== collectivesOf(native)) failures.push(`flight records differ: js ${collectivesOf(js)} native ${collectivesOf(native)}`);
  return { backend: comm.backend, version: comm.backendVersion };
}

/** allToAll with per-peer counts (zeros included) on DeviceBuffers, as MoE token routing does. */
async function allToAllCounts(comm: Communicator) {
  // counts[i][j]: what rank i sends to rank j (the diagonal, kept locally, is never 0).
  const counts = range(n, (i) => range(n, (j) => ((i * 3 + j * 5 + 1) % 4) * (j + 1)));
  const sendCounts = counts[rank]!;
  const recvCounts = counts.map((row) => row[rank]!);
  const total = (a: number[]) => a.reduce((s, v) => s + v, 0);
  for (const dtype of ['float32', 'int64', 'bfloat16', 'uint8'] as DType[]) {
    const input = await dev(dtype, range(total(sendCounts), (i) => val(rank, i)));
    const output = await dev(dtype, range(total(recvCounts) + 1, () => 0));  // one spare element stays 0
    await comm.allToAll(input, output, { sendCounts, recvCounts });
    const want = counts.flatMap((row, i) => {
      const from = total(row.slice(0, rank));
      return range(row[rank]!, (k) => val(i, from + k));
    });
    await expectEq(`${dtype} allToAll with counts`, output, [...want, 0]);
    input.dispose();
    output.dispose();
  }
  return { backend: comm.backend, counts: sendCounts };
}

async function main() {
  const scenario = process.env.SCENARIO ?? 'collectives';
  const timeoutMs = Number(process.env[`OP_TIMEOUT_MS_RANK${rank}`] ?? process.env.OP_TIMEOUT_MS ?? 30000);
  const comm = await init({ backend: 'nccl', timeoutMs });
  const result: Record<string, unknown> = { scenario, rank };
  if (scenario === 'collectives') Object.assign(result, await collectives(comm));
  if (scenario === 'alltoallv') Object.assign(result, await allToAllCounts(comm));
  if (scenario === 'fault') {
    const b = await dev('float32', [1, 2, 3]);
    await comm.allReduce(b);  // a healthy op first, for the flight record
    const t0 = Date.now();
    try {
      await comm.allReduce(b);
      result.error = null;
    } catch (err) {
      const e = err as { code: string; message: string };
      result.error = { code: e.code, message: e.message };
    }
    result.elapsedMs = Date.now() - t0;
    result.state = comm.state;
  }
  if (scenario === 'old-nccl') {
    try { DeviceBuffer.alloc({ dtype: 'float32', length: 4, ncclMemAlloc: true }); } catch (err) { result.memAlloc = (err as Error).message; }
    const b = await dev('float32', range(2 * n, (i) => val(rank, i)));
    const o = DeviceBuffer.alloc({ dtype: 'float32', length: 2 * n });
    await comm.allToAll(b, o);
    await expectEq('allToAll fallback', o, range(2 * n, (i) => val(Math.floor(i / 2), rank * 2 + (i % 2))));
    const g = DeviceBuffer.alloc({ dtype: 'float32', length: 2 * n * n });
    await comm.gather(b, rank === 0 ? g : null, { root: 0 });
    if (rank === 0) await expectEq('gather fallback', g, range(n, (r) => range(2 * n, (i) => val(r, i))).flat());
    result.version = comm.backendVersion;
  }
  result.failures = failures;
  console.log(`RESULT ${JSON.stringify(result)}`);
  if (scenario === 'fault') process.exit(0);  // the aborted communicator needs no teardown
  await comm.destroy();
}

main().catch((err) => {
  console.log(`RESULT ${JSON.stringify({ fatal: { code: (err as { code?: string }).code, message: (err as Error).message, stack: (err as Error).stack } })}`);
  process.exit(1);
});
