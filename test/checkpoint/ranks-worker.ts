/**
 * One rank of a multi-rank save of DeviceBuffer shards, on the stand-in GPU
 * libraries, over BACKEND ('nccl' or 'gloo'). Step 1: every rank saves its
 * ZeRO-style shard of `p` (a DeviceBuffer, padded) plus a replicated host
 * table; after the commit, every rank loads the whole of `p` into a DeviceBuffer
 * and compares it with the values the shards were built from. If DIE_RANK is
 * set, step 2 follows and that rank is SIGKILLed inside its shard write; the
 * survivors report how, and how fast, their `committed` settles. SAVE_STEP2=1
 * saves step 2 without that kill (rank 0 may be given NCCL_NODE_CKPT_FAULT).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { init } from '../../src/comm/init.js';
import { Checkpointer, load, shardFileName, type CheckpointState } from '../../src/checkpoint/index.js';
import { DeviceBuffer } from '../../src/gpu/device-buffer.js';
import { report } from '../helpers/ranks.js';
import { bigTensor, value } from './fixture.js';

export const NUMEL = 100_003;
const comm = await init({ backend: process.env.BACKEND as 'nccl' | 'gloo', timeoutMs: Number(process.env.COMM_TIMEOUT_MS ?? 600_000) });
const { rank, size } = comm;
const shard = Math.ceil(NUMEL / size);

async function stateFor(step: number): Promise<CheckpointState> {
  const host = new Float32Array(shard);
  for (let j = 0; j < shard && rank * shard + j < NUMEL; j++) host[j] = value('p', rank * shard + j, step);
  const offset = Math.min(rank * shard, NUMEL);
  return {
    tensors: {
      p: { data: await DeviceBuffer.from(host), globalShape: [NUMEL], offset, length: Math.max(0, Math.min(shard, NUMEL - offset)) },
      table: { data: new Int32Array([step, 2, 3, 4]), globalShape: [4], offset: 0 },
    },
    train: { step },
  };
}

const ck = await Checkpointer.create(process.env.CKPT_DIR!, { comm, keep: 0 });
const h1 = await ck.save(await stateFor(1), { async: true });
const info = await h1.committed;
const whole = DeviceBuffer.alloc({ dtype: 'float32', length: NUMEL });
const r = await load(info.dir, { p: { data: whole, offset: 0 } });
const got = (await whole.toHost()) as Float32Array;
let bad = 0;
for (let i = 0; i < NUMEL; i++) if (!Object.is(got[i], value('p', i, 1))) bad++;
const out: Record<string, unknown> = { rank, backend: comm.backend, deviceStaging: h1.deviceStaging, gds: info.gds, gdsFallback: info.gdsFallback, loadGds: r.gds, bad };

if (process.env.DIE_RANK !== undefined || process.env.SAVE_STEP2) {
  const dies = process.env.DIE_RANK !== undefined && rank === Number(process.env.DIE_RANK);
  const state = await stateFor(2);
  // The dying rank's big tensor keeps its shard write going long enough to be killed inside it.
  if (dies) state.tensors.big = { data: bigTensor(2), globalShape: [bigTensor.N], offset: 0 };
  const h2 = await ck.save(state, { async: true });
  if (dies) {
    // Once its shard file exists: past the barrier, inside the write.
    const file = join(h2.dir, shardFileName(rank, size));
    setInterval(() => existsSync(file) && process.kill(process.pid, 'SIGKILL'), 1);
    await new Promise(() => {});
  }
  const t0 = performance.now();
  try {
    await h2.committed;
    out.step2 = { committed: true };
  } catch (err) {
    const e = err as { code?: string; message: string; details?: unknown };
    out.step2 = { committed: false, code: e.code, message: e.message, details: e.details, ms: performance.now() - t0 };
  }
}
report(out);
process.exit(0);  // a communicator with a dead peer cannot be destroyed cleanly
