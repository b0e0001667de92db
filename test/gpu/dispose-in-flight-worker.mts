// One rank of dispose-in-flight.test.ts: a DeviceBuffer disposed while a collective
// that reads or writes it is still queued behind a large one. The collective must run
// on the memory it was given (freed only once the op settles), so its result is exact;
// memory allocated meanwhile must not alias it. Prints one line: RESULT <json>.
import { DeviceBuffer, init } from '../../src/index.js';

const rank = Number(process.env.RANK);
const n = Number(process.env.WORLD_SIZE);
const big = Number(process.env.BIG_ELEMENTS ?? 1 << 22);

async function main() {
  const comm = await init({ backend: 'nccl', timeoutMs: 30000 });
  const sum = (n * (n + 1)) / 2;
  const cases: Record<string, { ok: boolean; detail?: string }> = {};
  const fill = (len: number, v: number) => DeviceBuffer.from(new Float32Array(len).fill(v));
  const exact = async (b: DeviceBuffer, want: number) => {
    const got = (await b.toHost()) as Float32Array;
    const bad = got.findIndex((x) => x !== want);
    return bad < 0 ? undefined : `element ${bad} is ${got[bad]}, expected ${want}`;
  };
  async function run(name: string, f: () => Promise<string | undefined>) {
    try {
      const detail = await f();
      cases[name] = detail === undefined ? { ok: true } : { ok: false, detail };
    } catch (e) {
      cases[name] = { ok: false, detail: `${(e as { code?: string }).code}: ${(e as Error).message}` };
    }
  }

  // The input of an out-of-place all-reduce, disposed right after the call; memory
  // allocated and overwritten at once must not change what the all-reduce reads.
  await run('inputDisposed', async () => {
    const ahead = await fill(big, 1);
    const input = await fill(4096, rank + 1);
    const out = DeviceBuffer.alloc({ dtype: 'float32', length: 4096 });
    const first = comm.allReduce(ahead);
    const second = comm.allReduce(input, { out });
    input.dispose();
    const other = await fill(4096, -7); // may take the freed address if it were freed
    await Promise.all([first, second]);
    const detail = (await exact(out, sum)) ?? (await exact(other, -7));
    for (const b of [ahead, out, other]) b.dispose();
    return detail;
  });

  // A view's parent disposed while a collective on the view is queued.
  await run('parentOfViewDisposed', async () => {
    const ahead = await fill(big, 1);
    const parent = await fill(8192, rank + 1);
    const view = parent.view(4096 * 4, 4096);
    const out = DeviceBuffer.alloc({ dtype: 'float32', length: 4096 });
    const first = comm.allReduce(ahead);
    const second = comm.allReduce(view, { out });
    parent.dispose();
    await Promise.all([first, second]);
    const detail = await exact(out, sum);
    for (const b of [ahead, out]) b.dispose();
    return detail;
  });

  // The output of a broadcast disposed while queued: the call still settles cleanly
  // and the ranks stay in step (a correct all-reduce right after).
  await run('outputDisposed', async () => {
    const ahead = await fill(big, 1);
    const b = await fill(4096, rank === 0 ? 5 : 0);
    const first = comm.allReduce(ahead);
    const second = comm.broadcast(b, { root: 0 });
    b.dispose();
    await Promise.all([first, second]);
    const after = await fill(16, rank + 1);
    await comm.allReduce(after);
    const detail = await exact(after, sum);
    for (const x of [ahead, after]) x.dispose();
    return detail;
  });

  // Disposed before the call: still refused.
  await run('disposedBeforeRefused', async () => {
    const b = await fill(16, 1);
    b.dispose();
    try {
      await comm.allReduce(b);
      return 'the call on a disposed buffer was accepted';
    } catch (e) {
      return (e as { code?: string }).code === 'ERR_INVALID_ARGUMENT' ? undefined : `wrong error ${(e as Error).message}`;
    }
  });

  console.log(`RESULT ${JSON.stringify({ rank, cases, state: comm.state })}`);
  await comm.destroy();
}

main().catch((err) => {
  console.log(`RESULT ${JSON.stringify({ fatal: { code: (err as { code?: string }).code, message: (err as Error).message } })}`);
  process.exit(1);
});
