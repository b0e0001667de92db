/**
 * A Python virtual environment with reference packages (ml_dtypes, safetensors,
 * torch, ...) installed from the machine's package index, for tests that hold the
 * project to a real implementation. Made once per package set under the OS temp
 * directory and reused; never skipped quietly: a test that needs it fails with pip's
 * own words when the packages cannot be installed.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export function pythonWith(packages: string[]): string {
  const key = createHash('sha256').update(packages.join('\n')).digest('hex').slice(0, 12);
  const dir = join(tmpdir(), `nccl-node-py-${key}`);
  const python = join(dir, 'bin', 'python');
  if (existsSync(join(dir, '.complete'))) return python;
  const building = `${dir}.${process.pid}`;
  rmSync(building, { recursive: true, force: true });
  mkdirSync(building, { recursive: true });
  execFileSync('python3', ['-m', 'venv', building], { stdio: 'pipe' });
  try {
    // --retries 0: the index is local; an unreachable default index must not stall.
    execFileSync(join(building, 'bin', 'pip'), ['install', '--quiet', '--retries', '0', ...packages], {
      stdio: 'pipe',
      timeout: 600_000,
    });
  } catch (e) {
    const err = e as { stderr?: Buffer };
    throw new Error(`pip could not install ${packages.join(' ')}: ${err.stderr?.toString() ?? String(e)}`);
  }
  execFileSync('touch', [join(building, '.complete')]);
  // Only bin/python is used, and it finds its packages from where it stands (the
  // scripts' shebangs keep the build path): move the finished venv into place.
  rmSync(dir, { recursive: true, force: true });
  renameSync(building, dir);
  return python;
}
