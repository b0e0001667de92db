// The checkpoint path with NVIDIA's real libcufile.so.0 (fetched by
// scripts/fetch-reference.sh) over the stand-in CUDA driver: cuFileDriverOpen fails
// (the stand-in lacks driver symbols cuFile needs), the writer falls back to posix I/O
// and reports cuFile's error by name, and cuFile's log lands in the OS temp dir, not
// in the working directory. The worker is test/checkpoint/device-worker.ts.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { root, standinEnv } from '../gpu/helpers.js';
import { nvidiaReference } from './nvidia-reference.js';

const ref = nvidiaReference();
const scratch = mkdtempSync(join(tmpdir(), 'real-cufile-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function checkpoint(cwd: string, env: Record<string, string>) {
  const base = { ...process.env };
  for (const k of ['CUFILE_LOGFILE_PATH', 'CUFILE_ENV_PATH_JSON']) delete base[k];
  const r = spawnSync(process.execPath, ['--import', import.meta.resolve('tsx'), join(root, 'test/checkpoint/device-worker.ts')], {
    cwd, encoding: 'utf8', timeout: 120_000,
    env: { ...base, ...standinEnv(), NCCL_NODE_LIBCUFILE: ref!.libcufile, CKPT_DIR: join(cwd, 'ckpt'), TMPDIR: scratch, ...env },
  });
  const line = r.stdout.split('\n').find((l) => l.startsWith('@@'));
  return { status: r.status, signal: r.signal, out: r.stdout + r.stderr, report: line ? JSON.parse(line.slice(2)) : undefined };
}

describe.skipIf(!ref)('checkpoints with the real libcufile', () => {
  it('falls back to the posix writer naming the cuFile error; cufile.log goes to the temp dir, not the cwd', () => {
    const cwd = mkdtempSync(join(scratch, 'cwd-'));
    const r = checkpoint(cwd, {});
    expect(r.status, r.out).toBe(0);
    expect(r.report.bad).toEqual({ deviceW: 0, deviceB: 0, window: 0, hostW: 0, hostB: 0, hostInts: 0 });
    expect(r.report.commit.gds).toBe(false);
    const reason: string = r.report.commit.gdsFallback[0].reason;
    // cufile.h: CU_FILE_NVFS_SETUP_ERROR = CUFILEOP_BASE_ERR + 33.
    expect(reason).toMatch(/^cuFileDriverOpen failed: CU_FILE_NVFS_SETUP_ERROR \(5033\); cuFile's log: /);
    expect(reason).not.toMatch(/cuFile error \d/);
    expect(r.report.load.gds).toBe(false);
    expect(readdirSync(cwd)).toEqual(['ckpt']);  // no cufile.log beside it
    const log = reason.slice(reason.indexOf("cuFile's log: ") + 14);
    expect(log.startsWith(join(scratch, 'nccl-node-cufile-'))).toBe(true);
    expect(readFileSync(log, 'utf8')).toContain('cuFile initialization failed');
  }, 120_000);

  it("a user's CUFILE_LOGFILE_PATH wins", () => {
    const cwd = mkdtempSync(join(scratch, 'cwd-'));
    const mine = join(scratch, 'mine.log');
    const r = checkpoint(cwd, { CUFILE_LOGFILE_PATH: mine });
    expect(r.status, r.out).toBe(0);
    expect(r.report.commit.gdsFallback[0].reason).toContain(`cuFile's log: ${mine}`);
    expect(existsSync(mine)).toBe(true);
    expect(readdirSync(cwd)).toEqual(['ckpt']);
  }, 120_000);
});
