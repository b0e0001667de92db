// scripts/gpu/prepare.sh + run.sh, the GPU-machine run (docs/gpu.md), as a dry run on
// the stand-ins, so the script that carries the package to a real GPU cannot rot:
// what it packs fits the device tool's 64 MiB, and every check passes here.
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { root } from './helpers.js';

function bytesUnder(dir: string): number {
  return Number(execFileSync('du', ['-sb', dir]).toString().split('\t')[0]);
}

describe('the GPU-machine run (scripts/gpu)', () => {
  it('packs under 64 MiB and passes every check on the stand-ins', () => {
    execFileSync('bash', [join(root, 'scripts/gpu/prepare.sh')], { stdio: 'pipe', timeout: 300_000 });
    const gpu = join(root, '.gpu');
    expect(bytesUnder(gpu)).toBeLessThan(64 << 20);
    expect(statSync(join(gpu, 'node.xz')).size).toBeGreaterThan(1 << 20);
    const out = join(gpu, 'out');
    const r = spawnSync('bash', [join(gpu, 'run.sh'), '--standins'], { encoding: 'utf8', timeout: 300_000, env: { ...process.env, OUT: out } });
    expect(r.status, r.stdout.slice(-3000) + r.stderr.slice(-2000)).toBe(0);
    const checks = readFileSync(join(out, 'smoke.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { check: string; ok: boolean });
    expect(checks.map((c) => c.check)).toEqual(['gpu-info', 'device-buffer', 'kernels-fill-verify-cast', 'optimizer-kernels-vs-host',
      'nvml-health', 'nccl-one-rank-collectives', 'checkpoint-device-buffers', 'nccl-queued-in-order',
      'dispose-under-queued-collective', 'awaited-latency', 'train-device-vs-host']);
    expect(checks.filter((c) => !c.ok)).toEqual([]);
    for (const coll of ['all_reduce', 'all_gather', 'reduce_scatter', 'broadcast', 'alltoall']) {
      expect(readFileSync(join(out, `bench-${coll}.txt`), 'utf8'), coll).toMatch(/# Out of bounds values : 0 OK/);
    }
  }, 600_000);
});
