/**
 * One process against the stand-in GPU libraries: saves a state holding
 * DeviceBuffers (a padded float32 shard, a bfloat16 tensor) and a host array
 * into CKPT_DIR, overwrites the device sources as soon as save() returns, then
 * loads back into DeviceBuffers (whole and a window that cuts through chunks)
 * and into host arrays, and compares every element with the values the state
 * was built from. Last, it corrupts one byte of the shard and loads again.
 * Reports one "@@" JSON line; which I/O path ran depends on NCCL_NODE_LIBCUFILE
 * and CUFILE_STANDIN_FAIL, set by device.test.ts.
 */
import { openSync, closeSync, readSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { Checkpointer, load, verify, readManifest } from '../../src/checkpoint/index.js';
import { DeviceBuffer } from '../../src/gpu/device-buffer.js';
import { report } from '../helpers/ranks.js';
import { value } from './fixture.js';

const root = process.env.CKPT_DIR!;
const N = 300_001;    // float32 elements saved (odd: not a whole number of chunks or blocks)
const PAD = 3;        // the shard's padding, never saved
const H = 5000;       // bfloat16 elements
const STEP = 7;

const f32 = Float32Array.from({ length: N }, (_, i) => value('w', i, STEP));
const bf16 = Uint16Array.from({ length: H }, (_, i) => (i * 2654435761) >>> 16);
const ints = Int32Array.from({ length: 1000 }, (_, i) => i * i - 7);

const padded = new Float32Array(N + PAD).fill(-1);
padded.set(f32);
const w = await DeviceBuffer.from(padded);
const b = await DeviceBuffer.from(bf16, { dtype: 'bfloat16' });

// Small chunks and blocks so one tensor spans many of each (pipeline and CRC seams).
const ck = await Checkpointer.create(root, { write: { chunkBytes: 64 << 10, blockBytes: 256 << 10 } });
const h = await ck.save({
  tensors: {
    w: { data: w, globalShape: [N], offset: 0, length: N },
    b: { data: b, globalShape: [H], offset: 0 },
    ints: { data: ints, globalShape: [1000], offset: 0 },
  },
  train: { step: STEP },
}, { async: true });
// The snapshot is taken: the training step may overwrite its tensors now.
await w.fillBytes(0);
await b.fillBytes(0);
ints.fill(0);
const info = await h.committed;

function mismatches(got: ArrayLike<number>, want: ArrayLike<number>, from = 0): number {
  let bad = from === 0 ? Number(got.length !== want.length) : Number(from + got.length > want.length);
  for (let i = 0; i < got.length; i++) if (!Object.is(got[i], want[from + i])) bad++;
  return bad;
}

// Back into DeviceBuffers, prefilled with garbage; the float32 one longer than the tensor (padding is zeroed).
const dw = DeviceBuffer.alloc({ dtype: 'float32', length: N + PAD });
const db = DeviceBuffer.alloc({ dtype: 'bfloat16', length: H });
await dw.fillBytes(0xab);
await db.fillBytes(0xab);
const dev = await load(root, { w: { data: dw, offset: 0 }, b: { data: db, offset: 0 } });
const dwHost = (await dw.toHost()) as Float32Array;
const padOk = Array.from(dwHost.subarray(N)).every((v) => v === 0);

// A window that starts and ends inside chunks: edge chunks go through host scratch.
const WIN0 = 70_001, WIN = 100_003;
const win = DeviceBuffer.alloc({ dtype: 'float32', length: WIN });
const part = await load(root, { w: { data: win, offset: WIN0 } });

// Into host arrays.
const hw = new Float32Array(N), hb = new Uint16Array(H), hi = new Int32Array(1000);
await load(root, { w: { data: hw, offset: 0 }, b: { data: hb, dtype: 'bfloat16', offset: 0 }, ints: { data: hi, offset: 0 } });

const problems = (await verify(info.dir)).problems;
const manifest = await readManifest(info.dir);

// One flipped byte inside w's data must fail the device load with a checksum error.
const shard = manifest.tensors.w!.shards[0]!;
const file = join(info.dir, shard.file);
const at = shard.dataOffset + 4 * 123_457;
const fd = openSync(file, 'r+');
const one = Buffer.alloc(1);
readSync(fd, one, 0, 1, at);
one[0] = one[0]! ^ 0x40;
writeSync(fd, one, 0, 1, at);
closeSync(fd);
let corrupt: { code?: string; message: string } | null = null;
try {
  await load(root, { w: { data: DeviceBuffer.alloc({ dtype: 'float32', length: N }), offset: 0 } });
} catch (err) {
  corrupt = { code: (err as { code?: string }).code, message: (err as Error).message };
}
await ck.close();

report({
  deviceStaging: h.deviceStaging,
  commit: { gds: info.gds, gdsFallback: info.gdsFallback },
  manifestFiles: manifest.files,
  load: { gds: dev.gds, gdsFallback: dev.gdsFallback },
  partGds: part.gds,
  bad: {
    deviceW: mismatches(dwHost.subarray(0, N), f32),
    deviceB: mismatches((await db.toHost()) as Uint16Array, bf16),
    window: mismatches((await win.toHost()) as Float32Array, f32, WIN0),
    hostW: mismatches(hw, f32),
    hostB: mismatches(hb, bf16),
    hostInts: mismatches(hi, Int32Array.from({ length: 1000 }, (_, i) => i * i - 7)),
  },
  padOk,
  problems,
  corrupt,
  deviceBytes: N * 4 + H * 2,
});
