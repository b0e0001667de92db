/**
 * A Python virtual environment with the real torch (CPU wheel from /opt/wheels), for
 * tests that compare against torchrun and torch.distributed. Installing takes minutes,
 * so it is made once per wheel under the temp dir and reused by later runs; a lock
 * directory keeps concurrent test runs from installing it twice.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const WHEELS = '/opt/wheels';
const LOCK_WAIT_MS = 20 * 60_000;

export interface TorchVenv {
  dir: string;
  python: string;
  torchrun: string;
}

function wheel(): string {
  const found = existsSync(WHEELS) ? readdirSync(WHEELS).filter((f) => /^torch-[\d.]+\+cpu-.*\.whl$/.test(f)).sort() : [];
  const last = found[found.length - 1];
  if (last === undefined) throw new Error(`no torch-*+cpu-*.whl in ${WHEELS}: these tests need the real torch`);
  return path.join(WHEELS, last);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function install(dir: string, whl: string): Promise<void> {
  rmSync(dir, { recursive: true, force: true });
  const t0 = Date.now();
  await run('python3', ['-m', 'venv', '--without-pip', dir]);
  // The host's pip installs into the venv: faster than bootstrapping pip inside it.
  // Only the local indexes: this machine may have no internet.
  await run('python3', ['-m', 'pip', '--python', path.join(dir, 'bin', 'python'), 'install', '--no-input', '--disable-pip-version-check',
    '--index-url', 'file:///opt/pypi/simple', '--extra-index-url', 'file:///opt/pypi-more/simple', '--find-links', WHEELS,
    whl, 'numpy'], { maxBuffer: 64 * 1024 * 1024, timeout: LOCK_WAIT_MS });
  writeFileSync(path.join(dir, '.ready'), JSON.stringify({ wheel: whl, installMs: Date.now() - t0 }));
  process.stderr.write(`torch venv: installed ${path.basename(whl)} into ${dir} in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
}

/** The venv, installing it first when no earlier run did. */
export async function torchVenv(): Promise<TorchVenv> {
  const whl = wheel();
  const root = path.join(os.tmpdir(), 'nccl-node-torch-venv');
  const dir = path.join(root, path.basename(whl, '.whl'));
  const venv = { dir, python: path.join(dir, 'bin', 'python'), torchrun: path.join(dir, 'bin', 'torchrun') };
  const ready = (): boolean => existsSync(path.join(dir, '.ready'));
  if (ready()) return venv;
  mkdirSync(root, { recursive: true });
  const lock = `${dir}.lock`;
  const deadline = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
      mkdirSync(lock);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      let owner = NaN;
      try {
        owner = Number(readFileSync(path.join(lock, 'pid'), 'utf8'));
      } catch {
        // The owner has not written its pid yet.
      }
      if (Number.isInteger(owner) && !alive(owner)) rmSync(lock, { recursive: true, force: true });
      else if (Date.now() > deadline) throw new Error(`timed out waiting for another process to install ${dir}`);
      else await new Promise((r) => setTimeout(r, 1000));
      if (ready()) return venv;
      continue;
    }
    try {
      writeFileSync(path.join(lock, 'pid'), String(process.pid));
      if (!ready()) await install(dir, whl);
      return venv;
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  }
}
