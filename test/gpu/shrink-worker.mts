// One rank of the ncclCommShrink tests (spawned by helpers.ts runRanks) on the stand-in
// libraries: SCENARIO exclude | hung | invalid | old; prints RESULT <json>.
import { DeviceBuffer, init, type Communicator } from '../../src/index.js';

const rank = Number(process.env.RANK);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function sumOf(comm: Communicator, value: number): Promise<number> {
  const b = await DeviceBuffer.from(new Float32Array([value]));
  await comm.allReduce(b);
  const out = (await b.toHost()) as Float32Array;
  b.dispose();
  return out[0]!;
}

async function gathered(comm: Communicator, value: number): Promise<number[]> {
  const b = await DeviceBuffer.from(new Float32Array([value]));
  const out = DeviceBuffer.alloc({ dtype: 'float32', length: comm.size });
  await comm.allGather(b, out);
  return Array.from((await out.toHost()) as Float32Array);
}

function errorOf(f: () => unknown): { code: string; message: string } | null {
  try {
    f();
    return null;
  } catch (err) {
    return { code: (err as { code: string }).code, message: (err as Error).message };
  }
}

async function main() {
  const scenario = process.env.SCENARIO!;
  const comm = await init({ backend: 'nccl', timeoutMs: 60_000 });
  const result: Record<string, unknown> = { scenario, rank, supportsShrink: comm.supportsShrink };
  if (scenario === 'exclude') {
    // 3 ranks; rank 1 leaves; 0 and 2 shrink the healthy communicator (NCCL_SHRINK_DEFAULT).
    result.before = await sumOf(comm, rank + 1);
    if (rank === 1) {
      await comm.destroy();
    } else {
      const small = await comm.shrink([1]);
      result.after = { rank: small.rank, size: small.size, sum: await sumOf(small, rank + 1), ranks: await gathered(small, rank) };
      await small.destroy();
      await comm.destroy();
    }
  }
  if (scenario === 'hung') {
    // 3 ranks; rank 2's stream stops moving data in its 2nd all-reduce (NCCL_STANDIN_FAULT)
    // and stays alive for 8 s; 0 and 1 shrink it away with NCCL_SHRINK_ABORT while their
    // own all-reduce is still stuck on it, well before its 60 s deadline.
    result.before = await sumOf(comm, rank + 1);
    const b = await DeviceBuffer.from(new Float32Array([rank + 1]));
    const stuck = comm.allReduce(b).then(() => 'completed', (err: unknown) => (err as { code: string }).code);
    if (rank === 2) {
      await sleep(8000);
      comm.abort();
      result.stuck = await stuck;
    } else {
      await sleep(300);
      const t0 = performance.now();
      const small = await comm.shrink([2], { abort: true });
      result.shrinkMs = performance.now() - t0;
      result.stuck = await stuck;
      result.parentState = comm.state;
      result.after = { rank: small.rank, size: small.size, sum: await sumOf(small, rank + 1) };
      await small.destroy();
      comm.abort();
    }
  }
  if (scenario === 'invalid') {
    // Every refusal comes before anything is queued, naming what was expected and what came.
    result.errors = {
      self: errorOf(() => comm.shrink([rank])),
      range: errorOf(() => comm.shrink([5])),
      twice: errorOf(() => comm.shrink([1 - rank, 1 - rank])),
      notArray: errorOf(() => comm.shrink('1' as unknown as number[])),
      abort: errorOf(() => comm.shrink([1 - rank], { abort: 'yes' as unknown as boolean })),
    };
    // The communicator is still good for a collective afterwards.
    result.after = await sumOf(comm, rank + 1);
    await comm.destroy();
  }
  if (scenario === 'old') {
    result.error = errorOf(() => comm.shrink([1 - rank]));
    await comm.destroy();
  }
  console.log(`RESULT ${JSON.stringify(result)}`);
  if (scenario === 'hung') process.exit(0);  // the aborted communicators need no teardown
}

main().catch((err) => {
  console.log(`RESULT ${JSON.stringify({ fatal: { code: (err as { code?: string }).code, message: (err as Error).message, stack: (err as Error).stack } })}`);
  process.exit(1);
});
