// `nccl-node doctor` on the stand-ins: verdicts and exit codes for a ready node, a
// sick one (NVML says a GPU is lost) and one without libnccl.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { root, standinEnv } from './helpers.js';


function doctor(env: Record<string, string>, args: string[] = []) {
  const r = spawnSync(process.execPath, [join(root, 'bin/nccl-node.js'), 'doctor', ...args],
    { env: { ...process.env, ...standinEnv(), ...env }, encoding: 'utf8', timeout: 60000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

describe('nccl-node doctor', () => {
  it('ready: versions, 8 devices with health, exit 0', () => {
    const r = doctor({});
    expect(r.code, r.err).toBe(0);
    expect(r.out).toMatch(/NCCL {13}2\.\d+\.\d+/);
    expect(r.out).toMatch(/NVIDIA driver {4}570\.133\.20-standin/);
    expect(r.out).toContain('Devices: 8 (CUDA), 8 (NVML)');
    expect(r.out).toContain('GPU 7: NVIDIA H100 80GB HBM3 00000000:1F:00.0  34 C  71 W');
    expect(r.out).toMatch(/Verdict: ready: NCCL 2\.\d+\.\d+ on 8 GPUs, all healthy/);
  }, 60000);

  it('a lost GPU and uncorrected ECC errors: not ready, exit 1; --json has the same verdict', () => {
    const dir = mkdtempSync(join(tmpdir(), 'nccl-node-doctor-'));
    const cfg = join(dir, 'nvml.json');
    writeFileSync(cfg, JSON.stringify({ count: 2, devices: [{ ecc: { volatile: { corrected: 0, uncorrected: 2 } } }, { lost: true }] }));
    const r = doctor({ NCCL_NODE_NVML_STANDIN_CONFIG: cfg });
    expect(r.code).toBe(1);
    expect(r.out).toContain('problem: GPU 0: 2 uncorrected ECC errors since the driver loaded');
    expect(r.out).toContain('problem: GPU 1: GPU is lost (NVML_ERROR_GPU_IS_LOST): reset or reboot');
    expect(r.out).toContain('Verdict: not ready (2 problems)');
    const j = doctor({ NCCL_NODE_NVML_STANDIN_CONFIG: cfg }, ['--json']);
    const report = JSON.parse(j.out);
    expect(report.verdict).toBe('not ready');
    expect(report.probe.health.devices[1].problems).toEqual(['GPU is lost (NVML_ERROR_GPU_IS_LOST): reset or reboot']);
  }, 60000);

  it("lists the optional NCCL features the loaded library enables: the stand-in's, and most absent at 2.18.6", () => {
    const all = doctor({}, ['--json']);
    expect(JSON.parse(all.out).probe.info.ncclFeatures).toMatchObject({ register: true, symmetricWindows: true,
      memAlloc: true, alltoall: true, gather: true, scatter: true, finalize: true });
    const old = doctor({ NCCL_STANDIN_VERSION: '21806' });
    expect(old.code, old.err).toBe(0);
    expect(old.out).toContain('NCCL             2.18.6');
    expect(old.out).toContain('NCCL features    finalize (absent: register symmetricWindows memAlloc alltoall gather scatter shrink revoke)');
    expect(JSON.parse(doctor({ NCCL_STANDIN_VERSION: '21806' }, ['--json']).out).probe.info.ncclFeatures.memAlloc).toBe(false);
  }, 60000);

  it('no libnccl: found-by-file check says so, the child reports why, exit 1', () => {
    const r = doctor({ NCCL_NODE_LIBNCCL: '/nonexistent/libnccl.so.2' });
    expect(r.code).toBe(1);
    expect(r.out).toContain('nccl  not found');
    expect(r.out).toContain('problem: nccl library not found (set NCCL_NODE_LIBNCCL');
    expect(r.out).toMatch(/problem: NCCL: .*could not be loaded from \/nonexistent\/libnccl\.so\.2/);
  }, 60000);
});
