/**
 * One case of io-lifetime.test.ts (run with --expose-gc, on the stand-in GPU
 * libraries): memory handed to the checkpoint I/O calls is taken away while the
 * call runs: a host ArrayBuffer transferred (and its new owner collected), a
 * DeviceBuffer disposed. The call must finish on the memory it was given, so
 * what it wrote is exactly what was there; memory allocated meanwhile must not
 * be written; and a destination whose ArrayBuffer was transferred is reported.
 * Prints one line: RESULT <json>.
 */
import { readFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { io } from '../../src/checkpoint/io.js';
import { DeviceBuffer } from '../../src/gpu/device-buffer.js';
import { nativeHandle } from '../../src/native.js';

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with --expose-gc');
const BYTES = Number(process.env.IO_BYTES ?? 64 << 20);
const GDS = process.env.IO_GDS === '1';
const dir = mkdtempSync(join(tmpdir(), 'io-lifetime-'));
const file = join(dir, 'data');

/** Bytes no two runs share by accident: a multiplicative hash of the index. */
function pattern(bytes: number, seed: number): Uint8Array {
  const u32 = new Uint32Array(bytes / 4);
  for (let i = 0; i < u32.length; i++) u32[i] = Math.imul(i + seed, 2654435761);
  return new Uint8Array(u32.buffer);
}

/** Takes the memory from its ArrayBuffer and lets the new owner be collected. */
function detachAndCollect(a: ArrayBufferView): void {
  structuredClone(a.buffer, { transfer: [a.buffer as ArrayBuffer] });
  gc!();
}

/** The first index where `a` differs from `byte`, or -1. */
const notAll = (a: Uint8Array, byte: number) => a.findIndex((x) => x !== byte);

async function errorOf(p: Promise<unknown>): Promise<{ code?: string; message: string } | null> {
  try {
    await p;
    return null;
  } catch (e) {
    return { code: (e as { code?: string }).code, message: (e as Error).message };
  }
}

const cases: Record<string, () => Promise<Record<string, unknown>>> = {
  // A host segment transferred away while the file is written.
  async writeHostDetached() {
    const src = pattern(BYTES, 1);
    const want = io().crc32c(src);
    const p = io().ioWriteFile(file, [src], [true], { direct: false, sync: false, dropCache: false });
    detachAndCollect(src);
    const bystander = new Uint8Array(BYTES).fill(0x5a); // may take the freed pages if they were freed
    const res = await p;
    return { error: null, crcReported: res.crcs[0] === want, fileExact: io().crc32c(readFileSync(file)) === want, bystanderAt: notAll(bystander, 0x5a) };
  },

  // A host destination transferred away while the file is read into it.
  async readHostDetached() {
    const src = pattern(BYTES, 2);
    await io().ioWriteFile(file, [src], [false], { direct: false, sync: false, dropCache: true });
    const dst = new Uint8Array(BYTES);
    const p = io().ioReadFile(file, [0], [BYTES], [dst]);
    detachAndCollect(dst);
    const bystander = new Uint8Array(BYTES).fill(0x5a);
    const error = await errorOf(p);
    return { error, bystanderAt: notAll(bystander, 0x5a) };
  },

  // A copy's source and, separately, a copy's destination transferred away.
  async copyHostDetached() {
    const src = pattern(BYTES, 3);
    const want = io().crc32c(src);
    const dst = new Uint8Array(BYTES);
    const p = io().ioCopy([dst], [src]);
    detachAndCollect(src);
    const srcGone = await errorOf(p);
    const src2 = pattern(BYTES, 4);
    const dst2 = new Uint8Array(BYTES);
    const q = io().ioCopy([dst2], [src2]);
    detachAndCollect(dst2);
    const bystander = new Uint8Array(BYTES).fill(0x5a);
    const error = await errorOf(q);
    return { srcGone, copyExact: io().crc32c(dst) === want, error, bystanderAt: notAll(bystander, 0x5a) };
  },

  // A DeviceBuffer segment disposed while the file is written.
  async writeDeviceDisposed() {
    const host = pattern(BYTES, 5);
    const want = io().crc32c(host);
    const d = await DeviceBuffer.from(host);
    const p = io().ioWriteFile(file, [d[nativeHandle]], [true], { direct: GDS, sync: false, dropCache: false, gds: GDS });
    d.dispose();
    const bystander = DeviceBuffer.alloc({ dtype: 'uint8', length: BYTES }); // may take the freed address
    await bystander.fillBytes(0x5a);
    const res = await p;
    const back = (await bystander.toHost()) as Uint8Array;
    return { error: null, gds: res.gds || res.gdsReason, crcReported: res.crcs[0] === want, fileExact: io().crc32c(readFileSync(file)) === want, bystanderAt: notAll(back, 0x5a) };
  },

  // A DeviceBuffer destination disposed while the file is read into it.
  async readDeviceDisposed() {
    await io().ioWriteFile(file, [pattern(BYTES, 6)], [false], { direct: false, sync: false, dropCache: true });
    const d = DeviceBuffer.alloc({ dtype: 'uint8', length: BYTES });
    const p = io().ioReadFile(file, [0], [BYTES], [d[nativeHandle]], { gds: GDS });
    d.dispose();
    const bystander = DeviceBuffer.alloc({ dtype: 'uint8', length: BYTES });
    await bystander.fillBytes(0x5a);
    const error = await errorOf(p);
    const gds = await p.then((r) => r.gds || r.gdsReason, () => null);
    const back = (await bystander.toHost()) as Uint8Array;
    return { error, gds, bystanderAt: notAll(back, 0x5a) };
  },
};

const name = process.env.IO_CASE ?? '';
const f = cases[name];
if (!f) throw new Error(`IO_CASE: expected one of ${Object.keys(cases).join(', ')}, received ${JSON.stringify(name)}`);
try {
  console.log(`RESULT ${JSON.stringify(await f())}`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
