// `nccl-node doctor` with NVIDIA's real libnccl.so.2 (2.30.7, fetched by
// scripts/fetch-reference.sh): the version and the optional features it enables,
// read from the symbols the addon's loader resolved. The CUDA driver and NVML are the
// stand-ins (no GPU here); NCCL needs no driver to answer ncclGetVersion.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { root, standinEnv } from '../gpu/helpers.js';
import { nvidiaReference } from './nvidia-reference.js';

const ref = nvidiaReference();

function doctor(env: Record<string, string>, args: string[] = []) {
  const r = spawnSync(process.execPath, [join(root, 'bin/nccl-node.js'), 'doctor', ...args],
    { env: { ...process.env, ...standinEnv(), ...env }, encoding: 'utf8', timeout: 60000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

// Everything 2.30.7 declares in nccl.h that the loader knows about.
const ALL = ['register', 'symmetricWindows', 'memAlloc', 'alltoall', 'gather', 'scatter', 'shrink', 'revoke', 'finalize'];

describe.skipIf(!ref)('nccl-node doctor on the real libnccl', () => {
  it('reports NCCL 2.30.7 with every optional feature, in text and --json', () => {
    const r = doctor({ NCCL_NODE_LIBNCCL: ref!.libnccl });
    expect(r.code, r.out + r.err).toBe(0);
    expect(r.out).toContain(`nccl  ${ref!.libnccl}`);
    expect(r.out).toMatch(/NCCL {13}2\.30\.7\n/);
    expect(r.out).toContain(`NCCL features    ${ALL.join(' ')}\n`);
    expect(r.out).toMatch(/Verdict: ready: NCCL 2\.30\.7 on 8 GPUs/);
    const j = JSON.parse(doctor({ NCCL_NODE_LIBNCCL: ref!.libnccl }, ['--json']).out);
    expect(j.probe.info.ncclVersion).toBe('2.30.7');
    expect(j.probe.info.ncclVersionCode).toBe(23007);
    expect(j.probe.info.ncclFeatures).toEqual(Object.fromEntries(ALL.map((f) => [f, true])));
  }, 60000);

  it('without a CUDA driver: NCCL still reported with its features, the missing driver is the problem', () => {
    const r = doctor({ NCCL_NODE_LIBNCCL: ref!.libnccl, NCCL_NODE_LIBCUDA: '/nonexistent/libcuda.so.1' }, ['--json']);
    expect(r.code).toBe(1);
    const j = JSON.parse(r.out);
    expect(j.probe.info.ncclVersion).toBe('2.30.7');
    expect(Object.values(j.probe.info.ncclFeatures).every(Boolean)).toBe(true);
    expect(j.problems.join('\n')).toMatch(/CUDA: the CUDA driver \(libcuda\.so\.1\) could not be loaded from \/nonexistent\/libcuda\.so\.1/);
  }, 60000);
});
