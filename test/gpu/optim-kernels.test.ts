// The training step's kernels (accumulate, scale, sum of squares, AdamW, SGD) against
// the host optimizer in src/runtime/optim.ts: the same data through both gives the
// same bits. Runs the kernels' host twins in the stand-in libcuda (on a GPU, the
// CUDA kernels from the same definitions, native/kernels/optim_defs.h).
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { build, root, standinEnv } from './helpers.js';

const fatbin = join(build, 'kernels', 'nccl_node_kernels.fatbin');

const SCRIPT = `
import * as nn from ${JSON.stringify(join(root, 'src/index.ts'))};
import { AdamW, SGD, sumSquares } from ${JSON.stringify(join(root, 'src/runtime/optim.ts'))};
import * as k from ${JSON.stringify(join(root, 'src/gpu/cuda-kernels.ts'))};
let seed = 7;
const rand = () => { seed = (Math.imul(seed, 1103515245) + 12345) >>> 0; return (seed / 2 ** 32 - 0.5) * 2 ** ((seed % 17) - 8); };
const arr = (n) => Float32Array.from({ length: n }, rand);
const bits = (a) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('base64');
const host = async (b) => await b.toHost();
const out = {};
const n = 10007; // not a multiple of the 4096-element chunk
// add and scale
{
  const a = arr(n), b = arr(n);
  const da = await nn.DeviceBuffer.from(a), db = await nn.DeviceBuffer.from(b);
  await k.add(da, db);
  const want = a.map((x, i) => x + b[i]);
  out.add = [bits(await host(da)), bits(want)];
  const c = 0.37 / 3;
  await k.scale(db, c);
  out.scale = [bits(await host(db)), bits(b.map((x) => x * c))];
  out.sumsq = [await k.sumSquares(da), sumSquares([want])];
}
// AdamW, three steps, with weight decay
for (const [name, opt, make] of [
  ['adamw', new AdamW({ lr: 1e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 }), 'adamw'],
  ['sgd-momentum', new SGD({ lr: 0.05, momentum: 0.9, weightDecay: 0.01 }), 'sgd'],
  ['sgd', new SGD({ lr: 0.05, momentum: 0, weightDecay: 0 }), 'sgd'],
]) {
  const p = arr(n), dp = await nn.DeviceBuffer.from(p);
  const m = await nn.DeviceBuffer.from(new Float32Array(n)), v = await nn.DeviceBuffer.from(new Float32Array(n));
  for (let t = 1; t <= 3; t++) {
    const g = arr(n), dg = await nn.DeviceBuffer.from(g);
    opt.step([{ key: 'w', param: p, grad: g }]);
    if (make === 'adamw') {
      const { lr, beta1, beta2, eps, weightDecay } = opt.o;
      await k.adamw(dp, dg, m, v, { lr, beta1, beta2, eps, weightDecay, bc1: 1 - beta1 ** t, bc2: 1 - beta2 ** t });
    } else {
      await k.sgd(dp, dg, opt.o.momentum > 0 ? m : null, opt.o);
    }
  }
  const st = opt.state([{ key: 'w', size: n }]).tensors;
  out[name] = { param: [bits(await host(dp)), bits(p)],
    state: make === 'adamw' ? [bits(await host(m)) + bits(await host(v)), bits(st['w.exp_avg']) + bits(st['w.exp_avg_sq'])]
      : opt.o.momentum > 0 ? [bits(await host(m)), bits(st['w.momentum_buffer'])] : ['', ''] };
}
let bad; try { await k.add(await nn.DeviceBuffer.from(new Float32Array(4)), await nn.DeviceBuffer.from(new Float32Array(5))); } catch (e) { bad = e.code; }
out.mismatch = bad;
console.log(JSON.stringify(out));
`;

describe('training-step kernels match the host optimizer bit for bit', () => {
  it.skipIf(!existsSync(fatbin))('add, scale, sum of squares, AdamW and SGD (with and without momentum)', () => {
    const r = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', SCRIPT], {
      env: { ...process.env, ...standinEnv() }, encoding: 'utf8', timeout: 120_000,
    });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!);
    expect(out.add[0]).toBe(out.add[1]);
    expect(out.scale[0]).toBe(out.scale[1]);
    expect(out.sumsq[0]).toBe(out.sumsq[1]);
    for (const name of ['adamw', 'sgd-momentum', 'sgd']) {
      expect(out[name].param[0], `${name} parameters`).toBe(out[name].param[1]);
      expect(out[name].state[0], `${name} state`).toBe(out[name].state[1]);
    }
    expect(out.mismatch).toBe('ERR_SIZE_MISMATCH');
  });
});
