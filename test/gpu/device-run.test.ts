// scripts/gpu/prepare.sh + run.sh, the GPU-machine run (docs/gpu.md), as a dry run on
// the stand-ins, so the script that carries the package to a real GPU cannot rot:
// what it packs fits the device tool's 64 MiB, and every check passes here.
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { build, root } from './helpers.js';

function bytesUnder(dir: string): number {
  return Number(execFileSync('du', ['-sb', dir]).toString().split('\t')[0]);
}

describe('the GPU-machine run (scripts/gpu)', () => {
  it('packs under 64 MiB and passes every check on the stand-ins', () => {
    execFileSync('bash', [join(root, 'scripts/gpu/prepare.sh')], { stdio: 'pipe', timeout: 300_000 });
    const gpu = join(root, '.gpu');
    // The device tool carries the tracked tree and .gpu/ together: 64 MiB in all.
    const tracked = execFileSync('git', ['ls-files', '-z'], { cwd: root }).toString().split('\0').filter(Boolean)
      .reduce((sum, f) => { try { return sum + statSync(join(root, f)).size; } catch { return sum; } }, 0);
    expect(bytesUnder(gpu) + tracked).toBeLessThan(64 << 20);
    expect(statSync(join(gpu, 'node.xz')).size).toBeGreaterThan(1 << 20);
    // Run a copy outside the repository, as on the GPU machine: there no node_modules
    // above .gpu/ can supply a dependency prepare.sh failed to pack.
    const away = join(mkdtempSync(join(tmpdir(), 'nccl-node-gpu-run-')), '.gpu');
    cpSync(gpu, away, { recursive: true });
    const out = join(away, 'out');
    const r = spawnSync('bash', [join(away, 'run.sh'), '--standins'], { encoding: 'utf8', timeout: 300_000,
      env: { ...process.env, OUT: out, NN_STANDINS_DIR: join(build, 'standins') } });
    expect(r.status, r.stdout.slice(-3000) + r.stderr.slice(-2000)).toBe(0);
    const checks = readFileSync(join(out, 'smoke.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { check: string; ok: boolean });
    expect(checks.map((c) => c.check)).toEqual(['gpu-info', 'device-buffer', 'kernels-fill-verify-cast', 'optimizer-kernels-vs-host',
      'nvml-health', 'nccl-one-rank-collectives', 'checkpoint-device-buffers', 'nccl-queued-in-order',
      'dispose-under-queued-collective', 'dispose-while-registered', 'awaited-latency', 'back-to-back-per-op', 'train-device-vs-host']);
    expect(checks.filter((c) => !c.ok)).toEqual([]);
    for (const coll of ['all_reduce', 'all_gather', 'reduce_scatter', 'broadcast', 'alltoall']) {
      expect(readFileSync(join(out, `bench-${coll}-r1.txt`), 'utf8'), coll).toMatch(/# Out of bounds values : 0 OK/);
    }
  }, 600_000);
});
