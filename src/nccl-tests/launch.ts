/**
 * --nproc-per-node N: start N local ranks with the project's gang launcher, each
 * running `nccl-node bench ...` with the same arguments. Only rank 0 prints, so
 * output is not prefixed; the exit code is the ranks' (7 on wrong results).
 */
import { PassThrough } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { Launcher } from '../launch/launcher.js';

/** Set in the ranks' environment so they run the benchmark instead of launching again. */
export const CHILD_ENV = 'NCCL_NODE_BENCH_CHILD';

const CLI = fileURLToPath(new URL('../../bin/nccl-node.js', import.meta.url));

export async function launchLocal(nproc: number, benchArgs: string[]): Promise<number> {
  const notes = new PassThrough();
  const held: string[] = [];
  notes.on('data', (d: Buffer) => held.push(d.toString()));
  const launcher = await Launcher.start({
    script: CLI,
    scriptArgs: ['bench', ...benchArgs],
    nprocPerNode: nproc,
    masterPort: 0,
    prefix: false,
    env: { ...process.env, [CHILD_ENV]: '1' },
    // The launcher's own notes; ranks write to the inherited stderr directly.
    stderr: notes,
  });
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.on(sig, () => launcher.interrupt(sig));
  const result = await launcher.done;
  // Exit 7 is the benchmark's own verdict, already printed in the footer: the
  // launcher's notes about stopping the other ranks would only be noise then.
  if (result.exitCode !== 0 && result.exitCode !== 7) {
    process.stderr.write(held.join(''));
    process.stderr.write(`nccl-node bench: ${result.message}\n`);
  }
  return result.exitCode;
}
