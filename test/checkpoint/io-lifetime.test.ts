/**
 * Memory handed to the checkpoint I/O calls (ioWriteFile, ioReadFile, ioCopy) stays
 * valid until the call settles, whatever JavaScript does to it meanwhile: a host
 * ArrayBuffer transferred away and its new owner collected, a DeviceBuffer disposed.
 * The write then holds exactly the bytes it was given, nothing is written into memory
 * allocated meanwhile, and a destination transferred away is reported, not silently
 * lost. Each case runs in its own process (io-lifetime-worker.ts): freed memory under
 * a running call crashes or corrupts the process it runs in.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { root, standinEnv, standins } from '../gpu/helpers.js';

const cufile = join(standins, 'libcufile.so.0');
if (!existsSync(cufile)) throw new Error(`the checkpoint I/O tests need ${cufile}: run bash scripts/setup.sh`);

function run(name: string, env: Record<string, string> = {}): Record<string, any> {
  const r = spawnSync(process.execPath, ['--expose-gc', '--import', 'tsx', join(root, 'test/checkpoint/io-lifetime-worker.ts')], {
    cwd: root, env: { ...process.env, ...standinEnv(), NCCL_NODE_LIBCUFILE: cufile, IO_CASE: name, ...env }, encoding: 'utf8', timeout: 90_000,
  });
  const line = r.stdout.split('\n').find((l) => l.startsWith('RESULT '));
  expect(r.status, `${name} exited ${r.status} (signal ${r.signal}): ${r.stderr}`).toBe(0);
  return JSON.parse(line!.slice(7));
}

const DETACHED = { code: 'ERR_INVALID_ARGUMENT', message: expect.stringMatching(/detached \(transferred\) while/) };

describe('checkpoint I/O holds the memory it was given', () => {
  it('a host segment transferred during ioWriteFile: the file holds the bytes it had', () => {
    expect(run('writeHostDetached')).toEqual({ error: null, crcReported: true, fileExact: true, bystanderAt: -1 });
  });

  it('a host destination transferred during ioReadFile: reported, nothing written elsewhere', () => {
    expect(run('readHostDetached')).toEqual({ error: DETACHED, bystanderAt: -1 });
  });

  it('ioCopy: a source transferred still copies exactly; a destination transferred is reported', () => {
    expect(run('copyHostDetached')).toEqual({ srcGone: null, copyExact: true, error: DETACHED, bystanderAt: -1 });
  });

  it.each([['host bounce', '0'], ['cuFile', '1']])('a DeviceBuffer disposed during ioWriteFile (%s)', (_, gds) => {
    expect(run('writeDeviceDisposed', { IO_GDS: gds })).toEqual({ error: null, gds: gds === '1' || expect.any(String), crcReported: true, fileExact: true, bystanderAt: -1 });
  });

  it.each([['host bounce', '0'], ['cuFile', '1']])('a DeviceBuffer disposed during ioReadFile (%s)', (_, gds) => {
    expect(run('readDeviceDisposed', { IO_GDS: gds })).toEqual({ error: null, gds: gds === '1' || 'disabled (gds: false)', bystanderAt: -1 });
  });
});
