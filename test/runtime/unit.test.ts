/** In-process checks: bucket assignment, shard layout, casts, option validation and DDP misuse errors. */
import { describe, expect, it } from 'vitest';
import { init } from '../../src/comm/init.js';
import { isNcclNodeError } from '../../src/errors.js';
import { assignBuckets, DistributedDataParallel } from '../../src/runtime/ddp.js';
import { FullyShardedDataParallel, shardLayout } from '../../src/runtime/fsdp.js';
import { createOptimizer } from '../../src/runtime/optim.js';
import { fromHalf, toHalf } from '../../src/runtime/cast.js';
import { floatToBf16, floatToHalf } from '../../src/util/half.js';
import { freePort } from '../helpers/ranks.js';

describe('assignBuckets', () => {
  it('caps the first-registered bucket at firstBytes, the rest at cap, and launches last-registered first', () => {
    // sizes in float32 elements; first cap 100 B = 25 elements, cap 200 B = 50 elements
    const b = assignBuckets([10, 10, 10, 30, 20, 40, 5], 100, 200);
    expect(b).toEqual([[5, 6], [4], [2, 3], [0, 1]]);
  });
  it('puts a parameter larger than the cap in a bucket of its own', () => {
    expect(assignBuckets([1000, 1, 1], 100, 100)).toEqual([[1, 2], [0]]);
  });
  it('defaults to one bucket per 1 MiB / 25 MiB', () => {
    const mib = 1024 * 1024 / 4;
    expect(assignBuckets([mib / 2, mib / 2, mib, 6 * mib, 6 * mib, 6 * mib, 6 * mib, 1], 1024 * 1024, 25 * 1024 * 1024).length).toBe(3);
  });
});

it('shardLayout pads to a multiple of the world size', () => {
  expect(shardLayout(10, 4)).toEqual({ padded: 12, shard: 3 });
  expect(shardLayout(12, 4)).toEqual({ padded: 12, shard: 3 });
  expect(shardLayout(1, 3)).toEqual({ padded: 3, shard: 1 });
});

it('toHalf / fromHalf agree with util/half, including the pre-scale', () => {
  const src = Float32Array.from([0, 1, -2.5, 3.14159, 1e-3, 65504, 1e5, -1e-8, 0.1]);
  for (const dtype of ['bfloat16', 'float16'] as const) {
    const h = new Uint16Array(src.length);
    toHalf(src, h, dtype, 0.5);
    const one = dtype === 'bfloat16' ? floatToBf16 : floatToHalf;
    expect([...h]).toEqual([...src].map((x) => one(Math.fround(x * 0.5))));
    const back = new Float32Array(src.length);
    fromHalf(h, back, dtype);
    fromHalf(h, back, dtype, true);
    expect(back[2]).toBe(-2.5);
  }
});

describe('with a one-rank communicator', () => {
  const param = (name: string, n: number) => ({ name, size: n, data: new Float32Array(n).fill(1), grad: new Float32Array(n) });

  it('rejects bad options with ERR_INVALID_ARGUMENT and stable messages', async () => {
    const comm = await init({ rank: 0, worldSize: 1, token: 't', masterAddr: '127.0.0.1', masterPort: await freePort() });
    try {
      const opt = createOptimizer({ kind: 'sgd', lr: 0.1 });
      await expect(DistributedDataParallel.create(comm, [param('a', 3)], opt, { bucketBytes: 0 })).rejects.toSatisfy((e) => isNcclNodeError(e, 'ERR_INVALID_ARGUMENT') && /bucketBytes/.test((e as Error).message));
      await expect(FullyShardedDataParallel.create(comm, [[param('a', 3)]], opt, { stage: 4 as 3 })).rejects.toSatisfy((e) => isNcclNodeError(e, 'ERR_INVALID_ARGUMENT') && /stage/.test((e as Error).message));
      expect(() => createOptimizer({ kind: 'adamw', lr: -1 })).toThrow(/lr/);

      const a = param('a', 3), b = param('b', 5);
      const ddp = await DistributedDataParallel.create(comm, [a, b], opt, {});
      a.grad[0] = 2; // grads are now bucket views
      ddp.markReady(a);
      expect(() => ddp.markReady(a)).toThrow(/marked ready twice/);
      await expect(ddp.finish()).rejects.toThrow(/never marked ready: b/);
      ddp.markReady(b);
      await ddp.finish();
      expect(a.grad[0]).toBe(2);
      await ddp.step();
      expect(a.data[0]).toBeCloseTo(0.8, 6);
    } finally {
      await comm.destroy();
    }
  }, 20_000);
});
