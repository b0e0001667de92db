// Child process of gpu-verifiable.test.ts (the stand-in libcuda runs the kernels'
// host twins): every collective's initData through the GPU BenchDevice (kernels)
// and through the host one (verifiable.ts), on identically pre-filled slabs, for
// every op and dtype at 2 and 4 ranks; then compare() against known perturbations.
// Prints one JSON line.
import { DTYPE_BYTES, REDUCE_OPS, type DType, type HostArray } from '../../src/dtypes.js';
import { DeviceBuffer } from '../../src/gpu/device-buffer.js';
import type { BenchDevice, Collective, InitArgs } from '../../src/nccl-tests/collective.js';
import { COLLECTIVES } from '../../src/nccl-tests/collectives/index.js';
import { createGpuDevice } from '../../src/nccl-tests/gpu-device.js';
import { compareOnDevice, prepareOnDevice } from '../../src/nccl-tests/gpu-kernels.js';
import { hostDevice } from '../../src/nccl-tests/host-device.js';
import { countWrong, prepareExpected, prepareInput, VERIFIABLE_DTYPES, type GenOp } from '../../src/nccl-tests/verifiable.js';

const BYTES = Number(process.env.VERIFIABLE_BYTES ?? 2048);
const fallbacks: string[] = [];
const gpu = createGpuDevice((why) => fallbacks.push(why));

/** Bytes of a slab region: host memory as is, device memory downloaded. */
async function bytesOf(mem: unknown): Promise<Uint8Array> {
  if (mem instanceof ArrayBuffer) return new Uint8Array(mem);
  return (await (mem as DeviceBuffer).toHost()) as Uint8Array;
}

/** The same non-zero garbage in all three slabs of both devices: zero() and copy() must show. */
function garbage(bytes: number, salt: number): Uint8Array {
  return Uint8Array.from({ length: bytes }, (_, i) => (i * 131 + salt * 17 + 5) & 0xff);
}

async function slabs(dev: BenchDevice, bytes: number) {
  const mem = { send: dev.alloc(bytes), recv: dev.alloc(bytes), expected: dev.alloc(bytes) };
  for (const [k, m] of Object.entries(mem)) {
    const g = garbage(bytes, k.length);
    if (m instanceof ArrayBuffer) new Uint8Array(m).set(g);
    else await (m as DeviceBuffer).copyFrom(g);
  }
  return mem;
}

interface Case { coll: string; op: string; dtype: DType; n: number; rank: number; inPlace: boolean; slab: string; diffBytes: number }

async function initBoth(coll: Collective, op: GenOp, dtype: DType, n: number, rank: number, inPlace: boolean): Promise<Case[]> {
  const elt = DTYPE_BYTES[dtype];
  const counts = coll.counts(Math.floor(BYTES / elt), elt, n);
  const out: Case[] = [];
  const mems = [await slabs(hostDevice, BYTES), await slabs(gpu, BYTES)];
  const devs = [hostDevice, gpu];
  for (let d = 0; d < 2; d++) {
    const dev = devs[d]!;
    const m = mems[d]!;
    const a: InitArgs = {
      comm: undefined as never, dev, rank, nranks: n, dtype, op: op === 'nil' ? undefined : op, root: 1 % n, inPlace, counts,
      send: dev.slab(m.send, 0, dtype), recv: dev.slab(m.recv, 0, dtype), expected: dev.slab(m.expected, 0, dtype), rep: 3,
    };
    await coll.initData(a);
  }
  for (const slab of ['send', 'recv', 'expected'] as const) {
    const [h, g] = [await bytesOf(mems[0]![slab]), await bytesOf(mems[1]![slab])];
    let diff = 0;
    for (let i = 0; i < h.length; i++) if (h[i] !== g[i]) diff++;
    if (diff) out.push({ coll: coll.name, op, dtype, n, rank, inPlace, slab, diffBytes: diff });
  }
  for (const m of Object.values(mems[1]!)) (m as DeviceBuffer).dispose();
  return out;
}

const mismatches: Case[] = [];
let cases = 0;
for (const n of [2, 4]) {
  for (const coll of COLLECTIVES) {
    if (coll.powerOfTwo && (n & (n - 1)) !== 0) continue;
    const ops: GenOp[] = coll.redop === 'op' ? [...REDUCE_OPS] : ['nil'];
    for (const op of ops) for (const dtype of VERIFIABLE_DTYPES) for (let rank = 0; rank < n; rank++) for (const inPlace of [false, true]) {
      mismatches.push(...(await initBoth(coll, op, dtype, n, rank, inPlace)));
      cases++;
    }
  }
}

/** Direct calls at element offsets past 2^32 and a seed past 2^31 (idx and seed wrap in hash3). */
async function farOffsets(): Promise<string[]> {
  const bad: string[] = [];
  for (const dtype of VERIFIABLE_DTYPES) {
    for (const op of [...REDUCE_OPS, 'nil'] as GenOp[]) {
      for (const [rank, offset] of [[0, 2 ** 32 + 77], [3, 2 ** 40 + 5], [-1, 2 ** 33 - 3]] as const) {
        const buf = DeviceBuffer.alloc({ dtype, length: 64 });
        const seed = 0xdeadbeef;
        await prepareOnDevice(buf, dtype, op, 5, rank, seed, offset);
        const want = (await buf.toHost()) as HostArray;
        const ref = new (want.constructor as new (n: number) => HostArray)(64);
        if (rank >= 0) prepareInput(ref, dtype, op, 5, rank, seed, offset);
        else prepareExpected(ref, dtype, op, 5, seed, offset);
        const a = new Uint8Array(want.buffer, want.byteOffset, want.byteLength);
        const b = new Uint8Array(ref.buffer, ref.byteOffset, ref.byteLength);
        if (a.some((v, i) => v !== b[i])) bad.push(`${dtype}/${op}/rank ${rank}/offset ${offset}`);
        buf.dispose();
      }
    }
  }
  return bad;
}

/**
 * compare(): expected = avg's expected result; actual = expected with element i's
 * bits (as an unsigned word) moved by DELTAS[i % 8]. Wrong: |delta| > 2 for float
 * avg, delta != 0 otherwise; counted by hand, by the kernel and by countWrong.
 */
const DELTAS = [0, 1, -1, 2, -2, 3, -3, 1000];
async function comparisons() {
  const rows: Array<{ dtype: DType; op: GenOp; want: number; device: number; host: number }> = [];
  for (const dtype of VERIFIABLE_DTYPES) {
    for (const op of ['avg', 'sum', 'nil'] as GenOp[]) {
      const len = 40;
      const exp = DeviceBuffer.alloc({ dtype, length: len });
      await prepareOnDevice(exp, dtype, op, 3, -1, 9, 100);
      const e = (await exp.toHost()) as HostArray;
      const bytes = e.byteLength / len;
      const words = new Uint8Array(e.byteLength);
      words.set(new Uint8Array(e.buffer, e.byteOffset, e.byteLength));
      const dv = new DataView(words.buffer);
      let want = 0;
      const float = dtype.startsWith('float') || dtype === 'bfloat16';
      for (let i = 0; i < len; i++) {
        const d = DELTAS[i % DELTAS.length]!;
        if (Math.abs(d) > (float && op === 'avg' ? 2 : 0)) want++;
        const at = i * bytes;
        if (bytes === 1) dv.setUint8(at, (dv.getUint8(at) + d) & 0xff);
        else if (bytes === 2) dv.setUint16(at, (dv.getUint16(at, true) + d) & 0xffff, true);
        else if (bytes === 4) dv.setUint32(at, (dv.getUint32(at, true) + d) >>> 0, true);
        else dv.setBigUint64(at, BigInt.asUintN(64, dv.getBigUint64(at, true) + BigInt(d)), true);
      }
      const act = DeviceBuffer.alloc({ dtype, length: len });
      await act.copyFrom(words);
      const device = await compareOnDevice(act, exp, dtype, op);
      const actual = (await act.toHost()) as HostArray;
      rows.push({ dtype, op, want, device, host: countWrong(actual, e, dtype, op) });
      exp.dispose();
      act.dispose();
    }
  }
  return rows;
}

console.log(JSON.stringify({ cases, mismatches: mismatches.slice(0, 20), mismatchCount: mismatches.length, fallbacks, far: await farOffsets(), compare: await comparisons() }));
