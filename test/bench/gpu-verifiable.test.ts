// The GPU path makes and checks its data with the verifiable kernels; the host
// generators of verifiable.ts are the reference. Run on the stand-in libcuda, which
// executes the kernels' host twins (same verifiable_defs.h), in a child process:
// every collective x op x dtype, every rank at 2 and 4 ranks, in and out of place.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { build, root, standinEnv } from '../gpu/helpers.js';

const fatbin = join(build, 'kernels', 'nccl_node_kernels.fatbin');
const nvcc = spawnSync('nvcc', ['--version']).status === 0 || existsSync('/usr/local/cuda/bin/nvcc');

interface Report {
  cases: number;
  mismatchCount: number;
  mismatches: unknown[];
  fallbacks: string[];
  far: string[];
  compare: Array<{ dtype: string; op: string; want: number; device: number; host: number }>;
}

describe('verifiable kernels against the host generators', () => {
  it.skipIf(!nvcc)('initData through the kernels equals initData through verifiable.ts, byte for byte', () => {
    expect(existsSync(fatbin), `the kernels are not built: ${fatbin}`).toBe(true);
    const r = spawnSync(process.execPath, ['--import', 'tsx', join(root, 'test/bench/gpu-verifiable-worker.mts')], {
      env: { ...process.env, ...standinEnv() }, encoding: 'utf8', timeout: 240_000,
    });
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout.trim().split('\n').pop()!) as Report;
    // 2 ranks: 10 collectives; 4 ranks: the same. Reducing ones (all_reduce, reduce,
    // reduce_scatter, sendrecv) x 5 ops, the other 6 once; x 10 dtypes x ranks x 2.
    expect(out.cases).toBe((4 * 5 + 6) * 10 * 2 * (2 + 4));
    expect(out.fallbacks).toEqual([]);
    expect(out.mismatches).toEqual([]);
    expect(out.mismatchCount).toBe(0);
    // Element offsets past 2^32 and a seed past 2^31, every dtype x op x (input, expected).
    expect(out.far).toEqual([]);
    // compare(): 40 elements moved by 0, +-1, +-2, +-3, 1000 (5 of 40 unchanged, 15 beyond 2 ULP).
    expect(out.compare).toHaveLength(30);
    for (const c of out.compare) {
      const float = c.dtype.startsWith('float') || c.dtype === 'bfloat16';
      expect(c.want, `${c.dtype}/${c.op}`).toBe(float && c.op === 'avg' ? 15 : 35);
      expect([c.device, c.host], `${c.dtype}/${c.op}`).toEqual([c.want, c.want]);
    }
  }, 300_000);
});
