/**
 * Debian's Chromium for tests that look at pages as a person would: installed with
 * apt-get when missing (CI runs as root), started headless with the flags that keep
 * it off the network.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export function chromiumPath(): string {
  const which = () => spawnSync('bash', ['-c', 'command -v chromium'], { encoding: 'utf8' }).stdout.trim();
  if (which()) return which();
  if (process.getuid?.() !== 0) throw new Error('chromium is not installed and this is not root: apt-get install chromium');
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  execFileSync('apt-get', ['update', '-qq'], { env, stdio: 'pipe', timeout: 600_000 });
  execFileSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', 'chromium'], { env, stdio: 'pipe', timeout: 900_000 });
  if (!which()) throw new Error('apt-get installed chromium, but it is not on PATH');
  return which();
}

/** Runs headless Chromium on a URL with extra arguments (--screenshot=..., --dump-dom); returns stdout. */
export function headless(url: string, args: string[], timeoutMs = 120_000): string {
  const profile = mkdtempSync(join(tmpdir(), 'nccl-node-chromium-'));
  try {
    return execFileSync(chromiumPath(), [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', `--user-data-dir=${profile}`, ...args, url,
    ], { encoding: 'utf8', timeout: timeoutMs, stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 << 20 });
  } finally {
    rmSync(profile, { recursive: true, force: true });
  }
}
