/**
 * One rank of the checkpoint benchmark: BYTES of float32 state in 64 MiB tensors.
 * Times a synchronous save (call to commit), an async save's stall (cold: fresh
 * staging; warm: staging reused), an overlapped save (the call, and the time until
 * its snapshot is done), and a load of the same shard. Reports "@@{...}".
 */
import { init } from '../../src/comm/init.js';
import { Checkpointer, flatShard, load } from '../../src/checkpoint/index.js';

const comm = await init();
const total = Number(process.env.BYTES);
const dir = process.env.CKPT_DIR!;
const TENSOR = 16 << 20; // elements: 64 MiB
const n = Math.ceil(total / 4 / comm.size);
const tensors: Record<string, ReturnType<typeof flatShard>> = {};
const shards: Float32Array[] = [];
for (let left = n * comm.size, i = 0; left > 0; left -= TENSOR, i++) {
  const numel = Math.min(TENSOR, left);
  const a = new Float32Array(Math.ceil(numel / comm.size)).map((_, j) => j + i);
  shards.push(a);
  tensors[`t${i}`] = flatShard(a, numel, comm.rank, comm.size);
}
const ck = await Checkpointer.create(dir, { comm, keep: 2, whenBusy: 'wait' });
const state = (step: number) => ({ tensors, train: { step }, metadata: {} });
await comm.barrier();
const t0 = performance.now();
const coldAsync = await ck.save(state(1), { async: true });
const cold = await coldAsync.committed;
await comm.barrier();
const t1 = performance.now();
const sync = await ck.save(state(2), { async: false });
const syncMs = performance.now() - t1;
const info = await sync.committed;
await comm.barrier();
const warm = await ck.save(state(3), { async: true });
const warmInfo = await warm.committed;
await comm.barrier();
// Overlapped (CheckFreq-style): the call returns once the copies are started; the
// loop would run forward/backward until `snapshotted`, then step.
const t3 = performance.now();
const over = await ck.save(state(4), { async: true, overlap: true });
const overlapCallMs = performance.now() - t3;
await over.snapshotted;
const overlapSnapshotMs = performance.now() - t3;
await over.committed;
await comm.barrier();
const t2 = performance.now();
const targets = Object.fromEntries(Object.entries(tensors).map(([k, t], i) => [k, { data: new Float32Array(shards[i]!.length), offset: t.offset }]));
const r = await load(dir, targets);
const loadMs = performance.now() - t2;
await comm.barrier();
process.stdout.write(`@@${JSON.stringify({
  rank: comm.rank, bytes: info.bytes, syncMs, coldStallMs: coldAsync.stallMs, coldCommitMs: performance.now() - t0 > 0 ? cold.seconds * 1000 : 0,
  warmStallMs: warm.stallMs, overlapCallMs, overlapSnapshotMs, warmCommitMs: warmInfo.seconds * 1000, loadMs, bytesRead: r.bytesRead, direct: info.direct,
})}\n`);
await ck.close();
await comm.destroy();
