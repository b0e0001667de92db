/**
 * A tiny deterministic ZeRO training run (2 ranks): linear regression with the
 * weight sharded (padded), AdamW moments per shard, an xorshift RNG for the data
 * and a data cursor. MODE=full trains STEPS steps; MODE=first trains to STOP and
 * saves; MODE=resume loads the newest checkpoint and trains on to STEPS.
 * Prints the final weight shard as hex so runs can be compared bit for bit.
 */
import { init } from '../../src/comm/init.js';
import { Checkpointer, flatShard, load } from '../../src/checkpoint/index.js';
import { report } from '../helpers/ranks.js';

const D = 37;
const B = 4;
const comm = await init();
const { rank, size } = comm;
const shard = Math.ceil(D / size);
const w = new Float32Array(shard);
const m = new Float32Array(shard);
const v = new Float32Array(shard);
for (let j = 0; j < shard; j++) w[j] = rank * shard + j < D ? Math.fround(0.01 * (rank * shard + j)) : 0;
let train = { step: 0, rng: 12345, cursor: 0, adamT: 0 };

function next(): number {
  let x = train.rng;
  x ^= x << 13; x >>>= 0;
  x ^= x >>> 17;
  x ^= x << 5; x >>>= 0;
  train.rng = x;
  return x / 2 ** 32 - 0.5;
}

const dir = process.env.CKPT_DIR!;
const mode = process.env.MODE!;
const ck = await Checkpointer.create(dir, { comm });
if (mode === 'resume') {
  const r = await load(dir, { w: { data: w, offset: rank * shard }, 'w.exp_avg': { data: m, offset: rank * shard }, 'w.exp_avg_sq': { data: v, offset: rank * shard } });
  train = r.train as typeof train;
}
const stop = mode === 'first' ? Number(process.env.STOP) : Number(process.env.STEPS);
const full = new Float32Array(shard * size);
const grad = new Float32Array(shard * size);
const gshard = new Float32Array(shard);
while (train.step < stop) {
  await comm.allGather(w, full);
  grad.fill(0);
  // Every rank draws the same global batch from the shared RNG, then takes its rows.
  for (let b = 0; b < B * size; b++) {
    const x = Array.from({ length: D }, () => next());
    const y = next();
    train.cursor++;
    if (b % size !== rank) continue;
    let pred = 0;
    for (let k = 0; k < D; k++) pred += x[k]! * full[k]!;
    const e = pred - y;
    for (let k = 0; k < D; k++) grad[k] = Math.fround(grad[k]! + (e * x[k]!) / B);
  }
  await comm.reduceScatter(grad, gshard, { op: 'avg' });
  train.adamT++;
  const [b1, b2, lr] = [0.9, 0.999, 0.05];
  for (let j = 0; j < shard; j++) {
    m[j] = b1 * m[j]! + (1 - b1) * gshard[j]!;
    v[j] = b2 * v[j]! + (1 - b2) * gshard[j]! ** 2;
    const u = m[j]! / (1 - b1 ** train.adamT) / (Math.sqrt(v[j]! / (1 - b2 ** train.adamT)) + 1e-8);
    w[j] = w[j]! - lr * (u + 0.01 * w[j]!);
  }
  train.step++;
}
if (mode === 'first') {
  const h = await ck.save({
    tensors: { w: flatShard(w, D, rank, size), 'w.exp_avg': flatShard(m, D, rank, size), 'w.exp_avg_sq': flatShard(v, D, rank, size) },
    train: { ...train },
    metadata: { codeVersion: 'test' },
  }, { async: true });
  await h.committed;
}
report({ rank, step: train.step, w: Buffer.from(w.buffer).toString('hex') });
await ck.close();
await comm.destroy();
