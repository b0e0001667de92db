// One rank of the NCCL bad-input test (spawned by helpers.ts runRanks): every rank
// makes the same bad calls on the NCCL backend over the stand-ins, reports what each
// failed with, and after each checks that a correct all-reduce still works on every
// rank. Prints one line: RESULT <json>.
import { DeviceBuffer, init, isNcclNodeError } from '../../src/index.js';

const rank = Number(process.env.RANK);
const n = Number(process.env.WORLD_SIZE);

async function main() {
  const comm = await init({ backend: 'nccl', timeoutMs: 15000 });
  const steps: Record<string, { ok: boolean; code?: string; message?: string; healthy?: boolean; detail?: string }> = {};
  const dev = (values: number[]) => DeviceBuffer.from(Float32Array.from(values));

  /** A correct all-reduce after the bad call: the ranks are still in step. */
  async function healthy(): Promise<string | undefined> {
    const b = await dev([rank + 1, 7]);
    try {
      await comm.allReduce(b);
      const got = Array.from((await b.toHost()) as Float32Array);
      const want = [(n * (n + 1)) / 2, 7 * n];
      return JSON.stringify(got) === JSON.stringify(want) ? undefined : `got ${JSON.stringify(got)}`;
    } catch (err) {
      return `${(err as { code?: string }).code}: ${(err as Error).message}`;
    } finally {
      b.dispose();
    }
  }

  async function step(name: string, f: () => Promise<unknown> | unknown) {
    let entry: (typeof steps)[string];
    try {
      await f();
      entry = { ok: true };
    } catch (err) {
      entry = { ok: false, code: isNcclNodeError(err) ? err.code : 'NOT_NCCL_NODE_ERROR', message: (err as Error).message };
    }
    const detail = await healthy();
    steps[name] = { ...entry, healthy: detail === undefined, ...(detail ? { detail } : {}) };
  }

  const good = await dev([1, 2, 3, 4]);
  await step('hostArray', () => comm.allReduce(new Float32Array(4)));
  await step('hostOut', () => comm.allGather(good, new Float32Array(4 * n)));
  await step('hostSend', () => (rank === 0 ? comm.send(new Float32Array(4), 1) : rank === 1 ? comm.recv(new Float32Array(4), 0) : undefined));
  await step('allGatherSize', () => comm.allGather(good, DeviceBuffer.alloc({ dtype: 'float32', length: 4 * n - 1 })));
  await step('reduceScatterSize', () => comm.reduceScatter(good, DeviceBuffer.alloc({ dtype: 'float32', length: 3 })));
  await step('outSize', () => comm.allReduce(good, { out: DeviceBuffer.alloc({ dtype: 'float32', length: 2 }) }));
  await step('dtypeClash', () => comm.allReduce(good, { dtype: 'int32' }));
  await step('badRoot', () => comm.broadcast(good, { root: n }));
  await step('negativeRoot', () => comm.reduce(good, { root: -1 }));
  await step('peerSelf', () => comm.send(good, rank));
  await step('peerRange', () => comm.recv(good, n + 3));
  const gone = await dev([1, 2]);
  gone.dispose();
  await step('disposed', () => comm.allReduce(gone));
  const parent = await dev([1, 2, 3, 4, 5, 6, 7, 8]);
  const view = parent.view(0, 4);
  parent.dispose();
  await step('detachedView', () => comm.allReduce(view));
  await step('fakeDevice', () => comm.allReduce({ dtype: 'float32', device: 0, length: 4, byteLength: 16 } as never));
  good.dispose();
  console.log(`RESULT ${JSON.stringify({ rank, steps, state: comm.state })}`);
  await comm.destroy();
}

main().catch((err) => {
  console.log(`RESULT ${JSON.stringify({ fatal: { code: (err as { code?: string }).code, message: (err as Error).message, stack: (err as Error).stack } })}`);
  process.exit(1);
});
