/**
 * `nccl-node ckpt ls|verify|inspect|convert`: look at sharded checkpoints without
 * a training job. DIR is a checkpoint root (step-* directories; the newest
 * committed one is used) or one checkpoint directory.
 * Exit codes: 0 fine, 1 a checkpoint is corrupt, missing or unreadable (the
 * message names the file and tensor), 2 bad usage.
 */
import type { Command } from 'commander';

import { DTYPE_BYTES } from '../../dtypes.js';
import { listCheckpoints } from '../../checkpoint/layout.js';
import { numelOf, readManifest } from '../../checkpoint/manifest.js';
import { consolidate, resolveCheckpoint, verify } from '../../checkpoint/tools.js';

function mib(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

async function fail(f: () => Promise<void>): Promise<void> {
  try {
    await f();
  } catch (err) {
    process.stderr.write(`nccl-node ckpt: ${(err as Error).message}\n`);
    process.exitCode = 1;
  }
}

export function registerCkptCommand(program: Command): void {
  const ckpt = program.command('ckpt').description('list, verify, inspect and convert sharded checkpoints');

  ckpt.command('ls <dir>').description('checkpoints under DIR, newest last; uncommitted ones are marked').action((dir: string) =>
    fail(async () => {
      const all = await listCheckpoints(dir);
      if (all.length === 0) process.stdout.write(`no checkpoints in ${dir}\n`);
      for (const e of all) {
        if (!e.committed) {
          process.stdout.write(`${e.dir}  step ${e.step}  UNCOMMITTED (no commit.json: incomplete, ignored)\n`);
          continue;
        }
        try {
          const m = await readManifest(e.dir);
          const bytes = m.files.reduce((a, f) => a + f.bytes, 0);
          process.stdout.write(`${e.dir}  step ${m.step}  world ${m.worldSize}  ${Object.keys(m.tensors).length} tensors  ${mib(bytes)}  ${m.createdAt}\n`);
        } catch (err) {
          process.stdout.write(`${e.dir}  step ${e.step}  DAMAGED: ${(err as Error).message}\n`);
        }
      }
    }),
  );

  ckpt.command('verify <dir>').description('check the manifest digest and every shard byte (length, header, chunk, piece and file CRCs); exit 1 naming each bad file and tensor').action((dir: string) =>
    fail(async () => {
      const d = await resolveCheckpoint(dir);
      const { problems, bytes, manifest } = await verify(d);
      if (problems.length || !manifest) {
        for (const p of problems) process.stderr.write(`CORRUPT ${p.file}${p.tensor ? ` tensor ${p.tensor}` : ''}: ${p.error}\n`);
        throw new Error(`${d}: ${problems.length} problem(s)`);
      }
      process.stdout.write(`${d}: OK (step ${manifest.step}, ${Object.keys(manifest.tensors).length} tensors, ${mib(bytes)} verified)\n`);
    }),
  );

  ckpt.command('inspect <dir>').description('tensors, shapes, dtypes, shards, train state and metadata').option('--json', 'print the manifest as JSON').action((dir: string, o: { json?: boolean }) =>
    fail(async () => {
      const d = await resolveCheckpoint(dir);
      const m = await readManifest(d);
      if (o.json) {
        process.stdout.write(`${JSON.stringify(m, null, 2)}\n`);
        return;
      }
      const lines = [`checkpoint ${d}`, `step ${m.step}, written by ${m.worldSize} rank(s) at ${m.createdAt}`, '', 'tensor  dtype  global shape  pieces  size'];
      for (const [name, t] of Object.entries(m.tensors)) {
        lines.push(`${name}  ${t.dtype}  [${t.globalShape.join(', ')}]  ${t.shards.length}  ${mib(numelOf(t.globalShape) * DTYPE_BYTES[t.dtype])}`);
      }
      lines.push('', `train state: ${JSON.stringify(m.train)}`, `metadata: ${JSON.stringify(m.metadata)}`);
      lines.push(`files: ${m.files.map((f) => `${f.file} (${mib(f.bytes)}${f.direct ? ', O_DIRECT' : ''})`).join(', ')}`);
      process.stdout.write(`${lines.join('\n')}\n`);
    }),
  );

  ckpt.command('convert <dir> <out>').description('one consolidated safetensors file with global shapes (checksums verified)').action((dir: string, out: string) =>
    fail(async () => {
      const d = await resolveCheckpoint(dir);
      const r = await consolidate(d, out);
      process.stdout.write(`${out}: ${r.tensors} tensors, ${mib(r.bytes)} from ${d}\n`);
    }),
  );
}
