/**
 * DeviceBuffers in checkpoints, on the stand-in GPU libraries (never skipped:
 * test/gpu/helpers.ts throws when the build or its stand-ins are missing).
 * Each case runs device-worker.ts in a fresh process, since libcufile is loaded
 * once per process: GPUDirect Storage through the stand-in libcufile, and every
 * way back to the host path (library missing; handle, write or read refused).
 * The stand-in logs each cuFile call it serves (CUFILE_STANDIN_LOG), so the
 * path taken is checked apart from what the checkpointer itself reports.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { describeRanks, runRanks } from '../helpers/ranks.js';
import { standinEnv, standins } from '../gpu/helpers.js';

const cufile = join(standins, 'libcufile.so.0');
if (!existsSync(cufile)) throw new Error(`the checkpoint GDS tests need ${cufile} (cmake/checkpoint.cmake builds it): run bash scripts/setup.sh`);

const scratch = mkdtempSync(join(tmpdir(), 'ckpt-device-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

interface Run {
  r: Record<string, any>;
  log: { kind: string; bytes: number }[] | null;
}

let n = 0;
async function run(env: Record<string, string>): Promise<Run> {
  const dir = join(scratch, `case-${n++}`);
  const logFile = join(dir + '.cufile.log');
  const [res] = await runRanks('test/checkpoint/device-worker.ts', 1, {
    env: { ...standinEnv(), NCCL_NODE_LIBCUFILE: cufile, CUFILE_STANDIN_LOG: logFile, CKPT_DIR: dir, ...env },
  });
  expect(res!.code, describeRanks([res!])).toBe(0);
  const log = existsSync(logFile)
    ? readFileSync(logFile, 'utf8').trim().split('\n').map((l) => ({ kind: l.split(' ')[0]!, bytes: Number(l.split(' ')[1]) }))
    : null;
  return { r: res!.reports[0]!, log };
}

const sum = (log: Run['log'], kind: string) => (log ?? []).filter((l) => l.kind === kind).reduce((a, l) => a + l.bytes, 0);

/** What every case must get right, whichever path moved the bytes. */
function expectExact(r: Record<string, any>): void {
  expect(r.bad).toEqual({ deviceW: 0, deviceB: 0, window: 0, hostW: 0, hostB: 0, hostInts: 0 });
  expect(r.padOk).toBe(true);
  expect(r.problems).toEqual([]);
  expect(r.corrupt?.code).toBe('ERR_CHECKSUM');
  expect(r.corrupt?.message).toMatch(/tensor w: checksum mismatch/);
}

describe('DeviceBuffer checkpoints on the stand-ins', () => {
  it('GPUDirect Storage: device -> device snapshot, cuFileWrite, cuFileRead into DeviceBuffers', async () => {
    const { r, log } = await run({});
    expectExact(r);
    expect(r.deviceStaging).toBe('device');
    expect(r.commit).toEqual({ gds: true, gdsFallback: [] });
    expect(r.manifestFiles[0].gds).toBe(true);
    expect(r.load).toEqual({ gds: true, gdsFallback: [] });
    // Every device byte, and nothing else, went to the file through cuFileWrite.
    expect(sum(log, 'write')).toBe(r.deviceBytes);
    // Whole-chunk device ranges came through cuFileRead (3 device loads; edge chunks of the window via host).
    expect(sum(log, 'read')).toBeGreaterThan(2 * r.deviceBytes);
  });

  it('no libcufile: device -> pinned host snapshot, posix writer, reads through a host bounce buffer', async () => {
    const { r, log } = await run({ NCCL_NODE_LIBCUFILE: join(scratch, 'missing', 'libcufile.so.0') });
    expectExact(r);
    expect(r.deviceStaging).toBe('host');
    expect(r.commit.gds).toBe(false);
    expect(r.commit.gdsFallback).toEqual([{ rank: 0, reason: expect.stringMatching(/\(libcufile\.so\.0\) could not be loaded from .*missing.*NCCL_NODE_LIBCUFILE/) }]);
    expect(r.manifestFiles[0].gds).toBe(false);
    expect(r.load.gds).toBe(false);
    expect(r.load.gdsFallback[0].reason).toMatch(/NCCL_NODE_LIBCUFILE/);
    expect(log).toBeNull();
  });

  it('cuFile refuses the file (handle registration): the probe sends snapshots to pinned host', async () => {
    const { r, log } = await run({ CUFILE_STANDIN_FAIL: 'handle' });
    expectExact(r);
    expect(r.deviceStaging).toBe('host');
    expect(r.commit.gdsFallback[0].reason).toMatch(/cuFileHandleRegister .*CU_FILE_IO_NOT_SUPPORTED \(5008\)/);
    expect(r.load.gds).toBe(false);
    expect(sum(log, 'write') + sum(log, 'read')).toBe(0);
  });

  it('cuFileWrite fails: the shard is rewritten from the device staging through host blocks', async () => {
    const { r, log } = await run({ CUFILE_STANDIN_FAIL: 'write' });
    expectExact(r);
    expect(r.deviceStaging).toBe('device');
    expect(r.commit.gds).toBe(false);
    expect(r.commit.gdsFallback[0].reason).toMatch(/cuFileWrite .*Input\/output error/);
    expect(r.manifestFiles[0].gds).toBe(false);
    expect(sum(log, 'write')).toBe(0);
    expect(r.load.gds).toBe(true);
  });

  it('cuFileRead fails: device targets are filled through the host and still verified', async () => {
    const { r, log } = await run({ CUFILE_STANDIN_FAIL: 'read' });
    expectExact(r);
    expect(r.commit.gds).toBe(true);
    expect(sum(log, 'write')).toBe(r.deviceBytes);
    expect(r.load.gds).toBe(false);
    expect(r.load.gdsFallback[0].reason).toMatch(/cuFileRead .*Input\/output error/);
    expect(sum(log, 'read')).toBe(0);
  });
});
