// `nccl-node bench` on the NCCL backend over the stand-in libraries (the GPU
// BenchDevice, src/nccl-tests/gpu-device.ts): 2 and 4 ranks, every size checked against
// the expected results, the NCCL version in the header, and exit 7 on corruption.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { root, standinEnv } from '../gpu/helpers.js';


function bench(args: string[], env: Record<string, string> = {}, timeoutMs = 150000) {
  return new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
    const child = spawn(process.execPath, [join(root, 'bin/nccl-node.js'), 'bench', ...args],
      { env: { ...process.env, ...standinEnv(), ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    child.stdout.on('data', (d: Buffer) => { out += d.toString(); });
    child.stderr.on('data', (d: Buffer) => { err += d.toString(); });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('exit', (code) => { clearTimeout(timer); resolve({ code, out, err }); });
  });
}

/** The result rows: [bytes, count, type, redop, root, oopTime, algbw, busbw, #wrong, ipTime, algbw, busbw, #wrong]. */
const rows = (out: string) => out.split('\n').filter((l) => /^\s+\d+\s+\d+\s/.test(l)).map((l) => l.trim().split(/\s+/));

describe('bench on the NCCL stand-in', () => {
  for (const n of [2, 4]) {
    it(`all_reduce_perf at ${n} ranks, 8 B .. 1 MiB x4: #wrong 0 everywhere, NCCL version in the header`, async () => {
      const r = await bench(['all_reduce_perf', '--backend', 'nccl', '--nproc-per-node', String(n), '-b', '8', '-e', '1M', '-f', '4', '-n', '5', '-w', '1']);
      expect(r.code, r.err).toBe(0);
      // Data made and checked by the kernels: no fallback to the host generators.
      expect(r.err).not.toMatch(/verifiable-data kernels are unavailable/);
      expect(r.out).toMatch(/^# nccl-node version \S+ nccl-tests-format \S+ backend=nccl nccl-library=2\.\d+\.\d+$/m);
      // The driver's name and PCI address of each rank's device (the stand-in's: bus 0x18 + ordinal).
      for (let rank = 0; rank < n; rank++) {
        const bus = (0x18 + rank).toString(16);
        expect(r.out).toMatch(new RegExp(`Rank +${rank} Group +0 Pid +\\d+ on +\\S+ device +${rank} \\[0000:${bus}:00\\] nccl-node stand-in GPU ${rank}$`, 'm'));
      }
      const table = rows(r.out);
      // 8, 32, ..., 524288 bytes: 4^k * 8 up to 1 MiB.
      expect(table.map((t) => Number(t[0]))).toEqual([8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288]);
      for (const t of table) {
        expect(Number(t[1])).toBe(Number(t[0]) / 4);
        expect([t[2], t[3], t[8], t[12]]).toEqual(['float', 'sum', '0', '0']);
      }
      expect(r.out).toContain('# Out of bounds values : 0 OK');
    }, 180000);
  }

  it('every op and dtype, and gather-style tests with per-rank offsets, verify at 4 ranks', async () => {
    const r = await bench(['all_reduce', '--backend', 'nccl', '--nproc-per-node', '2', '-b', '64', '-e', '64', '-o', 'all', '-d', 'all', '-n', '1', '-w', '0']);
    expect(r.code, r.err).toBe(0);
    expect(r.err).not.toMatch(/verifiable-data kernels are unavailable/);
    expect(rows(r.out).length).toBe(50);  // 10 dtypes x 5 ops
    for (const t of [['reduce_scatter'], ['all_gather'], ['gather', '-r', '-1']]) {
      const g = await bench([t[0]!, ...t.slice(1), '--backend', 'nccl', '--nproc-per-node', '4', '-b', '64', '-e', '4K', '-f', '8', '-n', '2', '-w', '0']);
      expect(g.code, `${t[0]}: ${g.err}`).toBe(0);
      expect(g.out).toContain('# Out of bounds values : 0 OK');
    }
  }, 300000);

  it('a corrupted result on rank 1 is counted and exits 7', async () => {
    const r = await bench(['all_reduce_perf', '--backend', 'nccl', '--nproc-per-node', '2', '-b', '8', '-e', '1K', '-f', '4', '-n', '2', '-w', '0'],
      { NCCL_NODE_BENCH_CORRUPT: '1' });
    expect(r.code).toBe(7);
    const table = rows(r.out);
    expect(table.map((t) => Number(t[0]))).toEqual([8, 32, 128, 512]);
    for (const t of table) expect([t[8], t[12]]).toEqual(['1', '1']);
    expect(r.out).toContain('# Out of bounds values : 8 FAILED');
  }, 180000);
});
