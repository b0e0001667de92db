/**
 * Python virtual environments with reference packages (torch from the machine's wheel
 * directory, scipy, ml_dtypes, safetensors, PyYAML, ...) for tests that hold the project
 * to a real implementation. Each package set is installed once per machine under the
 * OS temp directory and reused; a lock directory keeps concurrent test runs from
 * installing it twice. The host's pip installs into the venv (`pip --python`), faster
 * than bootstrapping pip inside it; packages come from the machine's package indexes.
 * Never skipped quietly: a test that needs one fails with pip's own words.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { promisify } from 'node:util';
import { alive } from './cli.js';

const run = promisify(execFile);
const LOCK_WAIT_MS = 20 * 60_000;

export interface Venv {
  dir: string;
  python: string;
  /** A console script the packages installed (torchrun, ...). */
  bin(name: string): string;
}


async function install(dir: string, packages: string[]): Promise<void> {
  rmSync(dir, { recursive: true, force: true });
  const t0 = Date.now();
  await run('python3', ['-m', 'venv', '--without-pip', dir]);
  try {
    // --retries 0: the indexes are local; an unreachable default index must not stall.
    await run('python3', ['-m', 'pip', '--python', join(dir, 'bin', 'python'), 'install', '--no-input', '--disable-pip-version-check',
      '--retries', '0', '--quiet', ...packages], { maxBuffer: 64 << 20, timeout: LOCK_WAIT_MS });
  } catch (e) {
    throw new Error(`pip could not install ${packages.join(' ')}: ${(e as { stderr?: string }).stderr ?? String(e)}`);
  }
  writeFileSync(join(dir, '.ready'), JSON.stringify({ packages, installMs: Date.now() - t0 }));
  process.stderr.write(`python venv: installed ${packages.map((p) => basename(p)).join(' ')} into ${dir} in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
}

/** The venv holding `packages` (names or wheel paths), installing it first when no earlier run did. */
export async function venvWith(packages: string[]): Promise<Venv> {
  const key = createHash('sha256').update(packages.join('\n')).digest('hex').slice(0, 12);
  const root = join(tmpdir(), 'nccl-node-py');
  const dir = join(root, key);
  const venv: Venv = { dir, python: join(dir, 'bin', 'python'), bin: (name) => join(dir, 'bin', name) };
  const ready = (): boolean => existsSync(join(dir, '.ready'));
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
        owner = Number(readFileSync(join(lock, 'pid'), 'utf8'));
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
      writeFileSync(join(lock, 'pid'), String(process.pid));
      if (!ready()) await install(dir, packages);
      return venv;
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  }
}

/** The Python interpreter of a venv holding `packages`. */
export async function pythonWith(packages: string[]): Promise<string> {
  return (await venvWith(packages)).python;
}
