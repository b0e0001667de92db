// NVIDIA's real headers and libraries (scripts/fetch-reference.sh fetches them once per
// machine into a cache outside the repository), for test/abi and test/real.
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

export const root = join(import.meta.dirname, '..', '..');

export interface NvidiaReference {
  dir: string;
  libnccl: string;
  libcufile: string;
  include: { nccl: string; cufile: string; cuda: string };
}

let cached: NvidiaReference | null | undefined;

/**
 * The fetched references, fetching them if absent. Null, with a loud warning, only when
 * pip cannot fetch them (exit 3); any other failure of the script throws.
 */
export function nvidiaReference(): NvidiaReference | null {
  if (cached !== undefined) return cached;
  const r = spawnSync('bash', [join(root, 'scripts/fetch-reference.sh')], { encoding: 'utf8', timeout: 600_000 });
  if (r.status === 3) {
    console.warn(`\n*** SKIPPED: the real NVIDIA references could not be fetched with pip, so the ABI and ` +
      `real-library checks did not run ***\n${r.stderr}`);
    return (cached = null);
  }
  if (r.status !== 0) throw new Error(`scripts/fetch-reference.sh failed (${r.status ?? r.signal}):\n${r.stderr}`);
  const dir = r.stdout.trim();
  cached = {
    dir,
    libnccl: join(dir, 'nccl', 'libnccl.so.2'),
    libcufile: join(dir, 'cufile', 'libcufile.so.0'),
    include: { nccl: join(dir, 'nccl'), cufile: join(dir, 'cufile'), cuda: join(dir, 'cuda') },
  };
  for (const f of [cached.libnccl, cached.libcufile]) if (!existsSync(f)) throw new Error(`${f} missing after fetching`);
  return cached;
}
