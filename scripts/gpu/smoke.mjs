// The GPU checks scripts/gpu/run.sh runs on a real GPU (or, with --standins, on the
// stand-in libraries): the compiled package only, no test runner. Each check prints
// one JSON line {check, ok, ...details}; the exit code is the number of failed checks.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const pkg = process.env.NN_PKG;
const nn = await import(join(pkg, 'dist/index.js'));
const { AdamW } = await import(join(pkg, 'dist/runtime/index.js'));
let failed = 0;

async function check(name, f) {
  const t0 = performance.now();
  try {
    const details = (await f()) ?? {};
    const ok = details.ok !== false;
    if (!ok) failed++;
    console.log(JSON.stringify({ check: name, ok, ms: Math.round(performance.now() - t0), ...details }));
  } catch (e) {
    failed++;
    console.log(JSON.stringify({ check: name, ok: false, code: e?.code, error: String(e?.message ?? e), at: String(e?.stack ?? '').split('\n').slice(1, 6).map((l) => l.trim()) }));
  }
}

const same = (a, b) => a.length === b.length && a.every((x, i) => Object.is(x, b[i]));
// A one-rank communicator of its own for a check (each on its own store port).
const oneRank = (backend, masterPort) => nn.init({ backend, rank: 0, worldSize: 1, masterAddr: '127.0.0.1', masterPort });

await check('gpu-info', () => ({ info: nn.gpuInfo() }));

await check('device-buffer', async () => {
  const src = Float32Array.from({ length: 1 << 20 }, (_, i) => i * 0.5 - 7);
  const d = await nn.DeviceBuffer.from(src);
  const back = await d.toHost();
  const e = nn.DeviceBuffer.alloc({ dtype: 'float32', length: src.length });
  await e.copyFromDevice(d);
  return { ok: same(back, src) && same(await e.toHost(), src), ptrMod4096: Number(d.ptr % 4096n) };
});

await check('kernels-fill-verify-cast', async () => {
  const b = nn.DeviceBuffer.alloc({ dtype: 'float32', length: 4096 });
  await nn.kernels.fill(b, 0, 3);
  const wrongAlone = await nn.kernels.verify(b, 1, 3);
  const bf = nn.DeviceBuffer.alloc({ dtype: 'bfloat16', length: 4096 });
  await nn.kernels.cast(b, bf);
  const host = await bf.toHost();
  const want = Array.from({ length: 4096 }, (_, i) => nn.floatToBf16(nn.kernels.fillValue(i, 0, 3, 'float32')));
  return { ok: wrongAlone === 0 && same(Array.from(host), want), wrongAlone };
});

await check('optimizer-kernels-vs-host', async () => {
  // AdamW on the device (CUDA kernels) against the host optimizer: bit for bit.
  const n = 1 << 18;
  let s = 1;
  const rnd = () => ((s = (Math.imul(s, 1103515245) + 12345) >>> 0) / 2 ** 32 - 0.5);
  const p = Float32Array.from({ length: n }, rnd);
  const opt = new AdamW({ lr: 1e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });
  const dp = await nn.DeviceBuffer.from(p), m = await nn.DeviceBuffer.from(new Float32Array(n)), v = await nn.DeviceBuffer.from(new Float32Array(n));
  for (let t = 1; t <= 3; t++) {
    const g = Float32Array.from({ length: n }, rnd);
    opt.step([{ key: 'w', param: p, grad: g }]);
    await nn.kernels.adamw(dp, await nn.DeviceBuffer.from(g), m, v, { ...opt.o, bc1: 1 - 0.9 ** t, bc2: 1 - 0.95 ** t });
  }
  const got = await dp.toHost();
  let diff = 0;
  for (let i = 0; i < n; i++) if (!Object.is(got[i], p[i])) diff++;
  const sq = await nn.kernels.sumSquares(dp);
  return { ok: diff === 0, elementsDiffering: diff, sumSquares: sq };
});

await check('nvml-health', async () => ({ health: await nn.health() }));

await check('nccl-one-rank-collectives', async () => {
  const comm = await oneRank('nccl', 29611);
  const bad = [];
  const f = (xs) => nn.DeviceBuffer.from(Float32Array.from(xs));
  const expect = async (what, buf, want) => { const got = Array.from(await buf.toHost()); if (!same(got, want)) bad.push(`${what}: ${got} != ${want}`); };
  let b = await f([1, 2, 3, 4]);
  await comm.allReduce(b, { op: 'sum' }); await expect('allReduce', b, [1, 2, 3, 4]);
  await comm.allReduce(b, { op: 'avg' }); await expect('allReduce avg', b, [1, 2, 3, 4]);
  await comm.broadcast(b, { root: 0 }); await expect('broadcast', b, [1, 2, 3, 4]);
  const out = nn.DeviceBuffer.alloc({ dtype: 'float32', length: 4 });
  await comm.allGather(b, out); await expect('allGather', out, [1, 2, 3, 4]);
  await comm.reduceScatter(b, out, { op: 'max' }); await expect('reduceScatter', out, [1, 2, 3, 4]);
  await comm.allToAll(b, out); await expect('allToAll', out, [1, 2, 3, 4]);
  await nn.allReducePreMulSum(comm, b, 0.5); await expect('premulsum', b, [0.5, 1, 1.5, 2]);
  const e4 = await nn.DeviceBuffer.from(Uint8Array.from([1, 2, 3].map(nn.floatToFp8e4m3)), { dtype: 'float8e4m3' });
  await comm.allReduce(e4, { op: 'sum' });
  const e4back = Array.from(await e4.toHost(), nn.fp8e4m3ToFloat);
  if (!same(e4back, [1, 2, 3])) bad.push(`fp8 allReduce: ${e4back}`);
  await comm.barrier();
  const child = await comm.split({ color: 0 });
  await child.allReduce(b, { op: 'sum' }); await expect('split allReduce', b, [0.5, 1, 1.5, 2]);
  await child.destroy();
  await comm.destroy();
  return { ok: bad.length === 0, bad };
});

await check('checkpoint-device-buffers', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'nn-gpu-ckpt-'));
  const n = (64 << 20) / 4;
  const src = Float32Array.from({ length: n }, (_, i) => (i % 1000) * 0.25);
  const w = await nn.DeviceBuffer.from(src);
  const ck = await nn.checkpoint.Checkpointer.create(dir);
  const info = await (await ck.save({ tensors: { w: { data: w, globalShape: [n], offset: 0 } }, train: { step: 1 } }, { async: true })).committed;
  const back = nn.DeviceBuffer.alloc({ dtype: 'float32', length: n });
  const res = await nn.checkpoint.load(dir, { w: { data: back, offset: 0 } });
  return { ok: same(await back.toHost(), src), commit: { gds: info.gds, gdsFallback: info.gdsFallback }, load: { gds: res.gds } };
});

await check('nccl-queued-in-order', async () => {
  // Ops queued back to back without awaiting (DDP's buckets) on a nonblocking
  // communicator: each doubles the buffer, so any lost or reordered op shows.
  const comm = await oneRank('nccl', 29612);
  const a = await nn.DeviceBuffer.from(Float32Array.from({ length: 1 << 20 }, (_, i) => i % 97));
  const b = await nn.DeviceBuffer.from(Float32Array.from({ length: 4096 }, (_, i) => i));
  const works = [];
  for (let k = 0; k < 24; k++) {
    works.push(nn.allReducePreMulSum(comm, a, 2));
    works.push(comm.allReduce(b, { op: 'sum' }));
  }
  await Promise.all(works);
  const got = await a.toHost();
  let wrong = 0;
  for (let i = 0; i < got.length; i++) if (got[i] !== (i % 97) * 2 ** 24) wrong++;
  const bBack = await b.toHost();
  await comm.destroy();
  return { ok: wrong === 0 && bBack.every((x, i) => x === i), wrong, ops: works.length };
});

await check('dispose-under-queued-collective', async () => {
  // dispose() while the op is still queued behind a 1 GiB all-reduce: the op holds the
  // allocation until it settles; a buffer allocated meanwhile must not alias it.
  const comm = await oneRank('nccl', 29613);
  const ahead = nn.DeviceBuffer.alloc({ dtype: 'float32', length: process.env.NN_STANDINS ? 1 << 22 : 1 << 28 });
  await ahead.fillBytes(0);
  const input = await nn.DeviceBuffer.from(new Float32Array(1 << 16).fill(3));
  const out = nn.DeviceBuffer.alloc({ dtype: 'float32', length: 1 << 16 });
  const first = comm.allReduce(ahead);
  const second = comm.allReduce(input, { out });
  input.dispose();
  const other = await nn.DeviceBuffer.from(new Float32Array(1 << 16).fill(-7));
  await Promise.all([first, second]);
  const o = await out.toHost(), x = await other.toHost();
  await comm.destroy();
  return { ok: o.every((v) => v === 3) && x.every((v) => v === -7), outFirst: o[0], otherFirst: x[0] };
});

await check('dispose-while-registered', async () => {
  // A registered buffer disposed before deregister(): the registration holds the memory,
  // so NCCL's mappings of it stay valid and a buffer allocated meanwhile gets other memory.
  const comm = await oneRank('nccl', 29618);
  const a = await nn.DeviceBuffer.from(new Float32Array(1 << 20).fill(1));
  const reg = comm.register(a);
  const at = a.ptr;
  a.dispose();
  const b = await nn.DeviceBuffer.from(new Float32Array(1 << 20).fill(5));
  await comm.allReduce(b);
  const back = await b.toHost();
  const sameAddress = b.ptr === at;
  reg.deregister();
  await comm.destroy();
  return { ok: back.every((v) => v === 5) && !sameAddress, sameAddress };
});

await check('awaited-latency', async () => {
  // The time of one awaited 8-byte all-reduce on the GPU, the call path included
  // (scripts/gpu/torch_baseline.py measures torch.distributed's the same way).
  const comm = await oneRank('nccl', 29614);
  const b = await nn.DeviceBuffer.from(new Float32Array(2));
  const per = [];
  for (let r = 0; r < 5; r++) {
    const t0 = performance.now();
    for (let i = 0; i < 2000; i++) await comm.allReduce(b);
    per.push(((performance.now() - t0) * 1000) / 2000);
  }
  await comm.destroy();
  per.sort((x, y) => x - y);
  return { usPerCall: per, median: per[2] };
});

await check('back-to-back-per-op', async () => {
  // µs per op for 1000 small ops issued without awaiting, then awaited together (as
  // nccl-tests times): what each collective's path costs when the GPU work is nil.
  const comm = await oneRank('nccl', 29617);
  const a = await nn.DeviceBuffer.from(new Float32Array(4).fill(1));
  const o = nn.DeviceBuffer.alloc({ dtype: 'float32', length: 4 });
  const ops = {
    allReduceInPlace: () => comm.allReduce(a),
    allReduceOutOfPlace: () => comm.allReduce(a, { out: o }),
    allGather: () => comm.allGather(a, o),
    reduceScatter: () => comm.reduceScatter(a, o),
    broadcast: () => comm.broadcast(a, { root: 0 }),
    allToAll: () => comm.allToAll(a, o),
  };
  const us = {};
  for (const [name, f] of Object.entries(ops)) {
    const runs = [];
    for (let r = 0; r < 3; r++) {
      const t0 = performance.now();
      const works = [];
      for (let i = 0; i < 1000; i++) works.push(f());
      await Promise.all(works);
      runs.push(((performance.now() - t0) * 1000) / 1000);
    }
    us[name] = Math.min(...runs);
  }
  await comm.destroy();
  return { usPerOp: us };
});

await check('train-device-vs-host', async () => {
  // The same training loop on the GPU (NCCL, CUDA kernels) and on the host (Gloo, JS
  // arithmetic). One micro-batch a step: losses, gradient norms and parameters bit for
  // bit (docs/runtime.md). With accumulation the host's backward sums micro-batches in
  // its own gradient arrays, so there the parameters need only agree to 1e-4.
  const { train, MODELS } = await import(join(pkg, 'dist/train/index.js'));
  const gpu = await oneRank('nccl', 29615);
  const cpu = await oneRank('gloo', 29616);
  const runs = {};
  let ok = true;
  const cases = [
    ['ddp-clip', { parallel: { kind: 'ddp' }, microBatches: 1, clipNorm: 1 }, 0],
    ['fsdp3-clip', { parallel: { kind: 'fsdp', stage: 3 }, microBatches: 1, clipNorm: 1 }, 0],
    ['fsdp2-accumulate', { parallel: { kind: 'fsdp', stage: 2 }, microBatches: 2 }, 1e-4],
  ];
  for (const [name, extra, tol] of cases) {
    const cfg = { model: MODELS.test, steps: 4, globalBatch: 4, optimizer: { kind: 'adamw', lr: 1e-3, weightDecay: 0.01 }, dataSeed: 1, ...extra };
    const d = await train(gpu, { ...cfg, device: 'cuda' });
    const h = await train(cpu, { ...cfg, device: 'cpu' });
    // maxRel: the largest difference over the largest magnitude (as the tests' maxRelDiff).
    let paramsDiffering = 0, maxDiff = 0, maxAbs = 0;
    d.params.forEach((p, k) => p.forEach((x, i) => {
      const y = h.params[k][i];
      maxAbs = Math.max(maxAbs, Math.abs(y));
      if (!Object.is(x, y)) { paramsDiffering++; maxDiff = Math.max(maxDiff, Math.abs(x - y)); }
    }));
    const maxRel = maxDiff / maxAbs;
    const good = tol === 0 ? same(d.losses, h.losses) && same(d.gradNorms, h.gradNorms) && paramsDiffering === 0 : maxRel < tol;
    ok &&= good;
    runs[name] = { ok: good, paramsDiffering, maxRel, lossesDevice: d.losses, lossesHost: h.losses };
  }
  await gpu.destroy();
  await cpu.destroy();
  return { ok, runs };
});

// A check that failed half way may leave a communicator open, which keeps Node alive.
process.exit(failed);
