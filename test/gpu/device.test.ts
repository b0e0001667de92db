// Loading with and without the GPU libraries, DeviceBuffer / Stream / Event /
// PinnedHostBuffer, dmabuf export and the kernels, in child processes so each
// case gets its own library environment.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { addon, build, root, standinEnv } from './helpers.js';


/** Runs a TS snippet against src/index.ts with `env`; returns its JSON output. */
function run(code: string, env: Record<string, string>, execArgv: string[] = []): any {
  const script = `import * as nn from ${JSON.stringify(join(root, 'src/index.ts'))};\n` +
    `const out = await (async () => { ${code} })();\nconsole.log(JSON.stringify(out, (k, v) => typeof v === 'bigint' ? v.toString() : v));`;
  const r = spawnSync(process.execPath, [...execArgv, '--import', 'tsx', '--input-type=module', '-e', script], {
    env: { ...process.env, ...env }, encoding: 'utf8', timeout: 60000,
  });
  if (r.status !== 0) throw new Error(`child failed (${r.status}): ${r.stderr}`);
  return JSON.parse(r.stdout.trim().split('\n').pop()!);
}

describe('GPU libraries and device memory on the stand-ins', () => {
  it('without the libraries: the addon loads, and the errors name the library and the variable', () => {
    const out = run(`
      const info = nn.gpuInfo();
      let alloc; try { nn.DeviceBuffer.alloc({ dtype: 'float32', length: 4 }); } catch (e) { alloc = { code: e.code, message: e.message }; }
      let init; try { await nn.init({ backend: 'nccl', rank: 0, worldSize: 1, token: 't' }); } catch (e) { init = { code: e.code, message: e.message }; }
      return { info, alloc, init, auto: nn.detectBackend().backend };`,
    { NCCL_NODE_ADDON: addon, NCCL_NODE_LIBCUDA: '/nonexistent/libcuda.so.1', NCCL_NODE_LIBNCCL: '/nonexistent/libnccl.so.2' });
    expect(out.info.cuda).toBe(false);
    expect(out.info.cudaError).toMatch(/libcuda\.so\.1.*NCCL_NODE_LIBCUDA/);
    expect(out.info.ncclError).toMatch(/NCCL_NODE_LIBNCCL/);
    expect(out.alloc.code).toBe('ERR_UNAVAILABLE');
    expect(out.alloc.message).toMatch(/NCCL_NODE_LIBCUDA/);
    expect(out.init.code).toBe('ERR_UNAVAILABLE');
    expect(out.auto).toBe('gloo');
  });

  it('with the stand-ins: versions, device count, and auto picks nccl', () => {
    const out = run(`return { info: nn.gpuInfo(), auto: nn.detectBackend().backend };`, standinEnv());
    expect(out.info).toMatchObject({ cuda: true, nccl: true, devices: 8, ncclVersion: '2.30.7' });
    // Every device's name and PCI address as sysfs spells it (the stand-in's bus: 0x18 + ordinal).
    expect(out.info.gpus).toEqual(Array.from({ length: 8 }, (_, i) => ({ name: `nccl-node stand-in GPU ${i}`, pciBusId: `0000:${(0x18 + i).toString(16)}:00.0` })));
    expect(out.auto).toBe('nccl');
  });

  it('DeviceBuffer round trips, device copies, streams, events, pinned memory, dmabuf', () => {
    const out = run(`
      const a = await nn.DeviceBuffer.from(new Float32Array([1.5, -2, 3, 4]));
      const back = Array.from(await a.toHost());
      const h = await nn.DeviceBuffer.from(Uint16Array.of(nn.floatToHalf(0.5), nn.floatToHalf(-1)), { dtype: 'float16' });
      const half = Array.from(await h.toHost(), nn.halfToFloat);
      const s = new nn.Stream();
      const b = nn.DeviceBuffer.alloc({ dtype: 'float32', length: 4 });
      await b.copyFromDevice(a, s);
      const start = new nn.Event({ timing: true }), end = new nn.Event({ timing: true });
      start.record(s); await b.fillBytes(0, s); end.record(s);
      await s.synchronize(); await end.synchronize();
      const zeros = Array.from(await b.toHost());
      const pinned = new nn.PinnedHostBuffer(16);
      const view = pinned.view('float32'); view.set([9, 8, 7, 6]);
      await b.copyFrom(view); const fromPinned = Array.from(await b.copyTo(new Float32Array(4)));
      pinned.dispose();
      const big = nn.DeviceBuffer.alloc({ dtype: 'uint8', length: 8192 });
      // cuMemAlloc promises 256-byte alignment only: export from the first page boundary.
      const pageOffset = Number((4096n - (big.ptr % 4096n)) % 4096n);
      const fd = big.exportDmabuf(pageOffset, 4096);
      let bad; try { big.exportDmabuf(pageOffset + 1, 4096); } catch (e) { bad = e.code + ': ' + e.message; }
      let disposed; a.dispose(); try { await a.toHost(); } catch (e) { disposed = e.code; }
      let mismatch; try { await b.copyTo(new Float32Array(3)); } catch (e) { mismatch = e.code; }
      return { back, half, zeros, fromPinned, fd, bad, disposed, mismatch, elapsed: start.elapsedMs(end), ptr: typeof b.ptr, allocator: b.allocator };`,
    standinEnv());
    expect(out.back).toEqual([1.5, -2, 3, 4]);
    expect(out.half).toEqual([0.5, -1]);
    expect(out.zeros).toEqual([0, 0, 0, 0]);
    expect(out.fromPinned).toEqual([9, 8, 7, 6]);
    expect(out.fd).toBeGreaterThan(2);
    expect(out.bad).toMatch(/^ERR_INVALID_ARGUMENT: exportDmabuf: the range must start at a page-aligned device address/);
    expect(out.disposed).toBe('ERR_INVALID_ARGUMENT');
    expect(out.mismatch).toBe('ERR_SIZE_MISMATCH');
    expect(out.elapsed).toBeGreaterThanOrEqual(0);
    expect(out.ptr).toBe('bigint');
    expect(out.allocator).toBe('cuMemAlloc');
  });

  it('a PinnedHostBuffer collected without dispose() is unregistered before its memory goes', () => {
    // Memory freed while still page-locked leaves the driver's registration behind; the
    // next allocation at that address then cannot be pinned (and on a real driver later
    // calls fail oddly: cuMemAlloc answered CUDA_ERROR_ALREADY_MAPPED on an H200).
    const out = run(`
      const gc = globalThis.gc;
      const failures = [];
      for (let i = 0; i < 40; i++) {
        try {
          const p = new nn.PinnedHostBuffer(8 << 20);
          p.view('uint8')[i] = i; // dropped without dispose()
        } catch (e) { failures.push(i + ': ' + e.message); }
        gc(); await new Promise((r) => setTimeout(r, 5)); gc();
      }
      const kept = new nn.PinnedHostBuffer(1 << 20);
      kept.view('float32').fill(2);
      const d = await nn.DeviceBuffer.from(kept.view('float32'));
      const back = await d.toHost();
      kept.dispose();
      kept.dispose(); // idempotent
      return { failures, sum: back.reduce((a, b) => a + b, 0), length: back.length };`, standinEnv(), ['--expose-gc']);
    expect(out.failures).toEqual([]);
    expect(out.sum).toBe(2 * (1 << 18));
  });

  it('copies between host and device hold the host memory: a transfer under the copy neither frees it nor loses data silently', () => {
    // The copy runs on the stream after the call returns (for pinned memory on a real GPU,
    // and for all host memory on the stand-in driver); the ArrayBuffer's memory must outlive it.
    const out = run(`
      const gc = globalThis.gc;
      const n = 16 << 20;
      const src = Float32Array.from({ length: n }, (_, i) => i % 1013);
      const want = src.slice();
      const d = nn.DeviceBuffer.alloc({ dtype: 'float32', length: n });
      const up = d.copyFrom(src);
      structuredClone(src.buffer, { transfer: [src.buffer] }); gc();
      const bystander = new Float32Array(n).fill(-3); // may take the freed pages if they were freed
      await up;
      const back = await d.toHost();
      let wrongUp = 0; for (let i = 0; i < n; i++) if (back[i] !== want[i]) wrongUp++;
      const dst = new Float32Array(n);
      const down = d.copyTo(dst);
      structuredClone(dst.buffer, { transfer: [dst.buffer] }); gc();
      const bystander2 = new Float32Array(n).fill(-3);
      let downErr = null; try { await down; } catch (e) { downErr = { code: e.code, message: e.message }; }
      return { wrongUp, downErr, bad: bystander.findIndex((v) => v !== -3), bad2: bystander2.findIndex((v) => v !== -3) };`,
    standinEnv(), ['--expose-gc']);
    expect(out).toEqual({ wrongUp: 0, downErr: { code: 'ERR_INVALID_ARGUMENT', message: expect.stringMatching(/detached \(transferred\) while/) }, bad: -1, bad2: -1 });
  });

  it('DeviceBuffer.alloc rejects an empty buffer', () => {
    const out = run(`
      try { nn.DeviceBuffer.alloc({ dtype: 'float32', length: 0 }); } catch (e) { return { zero: e.code }; }`, standinEnv());
    expect(out.zero).toBe('ERR_INVALID_ARGUMENT');
  });
});

describe('CUDA kernels', () => {
  const nvcc = spawnSync('nvcc', ['--version']).status === 0 || existsSync('/usr/local/cuda/bin/nvcc');
  const fatbin = join(build, 'kernels', 'nccl_node_kernels.fatbin');

  it.skipIf(!nvcc)('nvcc compiled them into a fatbin that names every kernel', () => {
    expect(existsSync(fatbin), 'build with nvcc on PATH: bash scripts/setup.sh').toBe(true);
    const text = execFileSync('strings', [fatbin], { encoding: 'utf8' });
    for (const k of ['fill', 'verify', 'cast_f32_bf16', 'cast_f32_f16', 'cast_bf16_f32', 'cast_f16_f32', 'checksum']) {
      expect(text).toContain(`nccl_node_${k}`);
    }
  });

  it.skipIf(!existsSync(fatbin))('kernels built with CUDA 13 on an older driver: ERR_UNAVAILABLE naming both versions, before cuModuleLoadData', () => {
    const built = readFileSync(fatbin.replace(/\.fatbin$/, '.cuda-version'), 'utf8').trim();
    expect(Number(built)).toBeGreaterThanOrEqual(12000);
    const older = String(Number(built) - 10);
    const out = run(`
      const b = nn.DeviceBuffer.alloc({ dtype: 'float32', length: 64 });
      try { await nn.kernels.fill(b, 1, 3); return { ok: true }; } catch (e) { return { code: e.code, message: e.message }; }`,
    standinEnv({ CUDA_STANDIN_DRIVER_VERSION: older }));
    expect(out.code).toBe('ERR_UNAVAILABLE');
    const text = (v: number) => `${Math.floor(v / 1000)}.${(v % 1000) / 10}`;
    expect(out.message).toContain(`built with CUDA ${text(Number(built))}`);
    expect(out.message).toContain(`this driver supports CUDA ${text(Number(older))}`);
    // The same build on a driver as new as the toolkit loads and runs.
    const ok = run(`
      const b = nn.DeviceBuffer.alloc({ dtype: 'float32', length: 64 });
      await nn.kernels.fill(b, 1, 3); return { ok: true };`, standinEnv({ CUDA_STANDIN_DRIVER_VERSION: built }));
    expect(ok.ok).toBe(true);
  });

  it.skipIf(!existsSync(fatbin))('fill / verify / casts / checksum give what the kernels define', () => {
    const out = run(`
      const { kernels } = nn;
      const b = nn.DeviceBuffer.alloc({ dtype: 'float32', length: 64 });
      await kernels.fill(b, 1, 3);
      const filled = Array.from(await b.toHost());
      const expectFill = Array.from({ length: 64 }, (_, i) => kernels.fillValue(i, 1, 3, 'float32'));
      const sum = await nn.DeviceBuffer.from(Float32Array.from({ length: 64 }, (_, i) => [0, 1, 2].reduce((s, r) => s + kernels.fillValue(i, r, 3, 'float32'), 0)));
      const ok = await kernels.verify(sum, 3, 3);
      const wrong = await kernels.verify(b, 3, 3);
      const src = await nn.DeviceBuffer.from(new Float32Array([1, 1.00390625, 65520, -0.1, 3.4e38]));
      const bf = nn.DeviceBuffer.alloc({ dtype: 'bfloat16', length: 5 });
      const hf = nn.DeviceBuffer.alloc({ dtype: 'float16', length: 5 });
      await kernels.cast(src, bf); await kernels.cast(src, hf);
      const bfBits = Array.from(await bf.toHost()), hfBits = Array.from(await hf.toHost());
      const jsBf = [1, 1.00390625, 65520, -0.1, 3.4e38].map(nn.floatToBf16), jsHf = [1, 1.00390625, 65520, -0.1, 3.4e38].map(nn.floatToHalf);
      const f32 = nn.DeviceBuffer.alloc({ dtype: 'float32', length: 5 });
      await kernels.cast(hf, f32); const hfBack = Array.from(await f32.toHost());
      const bytes = new Uint8Array([5, 0, 255, 7, 9]);
      const cb = await nn.DeviceBuffer.from(bytes);
      const cks = await kernels.checksum(cb);
      let js = 0n; bytes.forEach((v, i) => { js += BigInt(v + 1) * BigInt(i + 1); });
      return { same: JSON.stringify(filled) === JSON.stringify(expectFill), ok, wrong, bfBits, jsBf, hfBits, jsHf, hfBack, jsHfBack: jsHf.map(nn.halfToFloat), cks, js };`,
    standinEnv());
    expect(out.same).toBe(true);
    expect(out.ok).toBe(0);
    expect(out.wrong).toBeGreaterThan(0);
    expect(out.bfBits).toEqual(out.jsBf);
    expect(out.hfBits).toEqual(out.jsHf);
    expect(out.hfBack).toEqual(out.jsHfBack);
    expect(out.cks).toBe(out.js.toString());
  });
});
