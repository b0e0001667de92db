/**
 * NCCL_NODE_GLOO_TUNING: a JSON file that overrides the CPU backend's built-in
 * per-size algorithm table (docs/gloo.md, "Choosing the algorithm"). Per collective
 * and world size, a list of rules {maxBytes, algorithm}; the first rule whose
 * maxBytes is at least the call's size picks the algorithm (`maxBytes: null`: any
 * size; `auto`: the built-in choice). `bench/comm/sweep.ts --write-tuning` writes one
 * from what the machine measures.
 *
 * The file is validated here and handed to the native backend as canonical text
 * (one rule per line); the backend hashes that text and, at connect, fails every
 * rank when their hashes differ, so all ranks pick the same algorithm for a call.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { NcclNodeError } from '../../errors.js';

/** Algorithm names per collective (native/gloo/gloo_tuning.cpp parses the same). */
export const TUNING_ALGORITHMS = {
  allreduce: ['auto', 'mesh', 'mesh-rs-ag', 'tcp-ring', 'ring', 'bcube', 'legacy-ring', 'ring-chunked', 'halving-doubling', 'legacy-bcube'],
  allgather: ['auto', 'mesh', 'tcp-ring', 'gloo', 'legacy-ring'],
  reducescatter: ['auto', 'mesh', 'tcp-ring', 'alltoall', 'halving-doubling'],
} as const;

export type TuningCollective = keyof typeof TUNING_ALGORITHMS;

const rules = <T extends readonly [string, ...string[]]>(names: T) =>
  z.array(z.strictObject({
    maxBytes: z.number().int().positive().nullable(),
    algorithm: z.enum(names),
  })).min(1).superRefine((list, ctx) => {
    for (let i = 0; i < list.length; i++) {
      const m = list[i]!.maxBytes;
      if (m === null && i !== list.length - 1) {
        ctx.addIssue({ code: 'custom', path: [i, 'maxBytes'], message: 'null (any size) is allowed only in the last rule' });
      }
      const prev = i > 0 ? list[i - 1]!.maxBytes : 0;
      if (m !== null && prev !== null && m <= prev) {
        ctx.addIssue({ code: 'custom', path: [i, 'maxBytes'], message: `must grow from rule to rule: ${m} after ${prev}` });
      }
    }
  });

const worldSize = z.string().regex(/^[1-9][0-9]*$/, 'a world size (a positive integer)');

export const tuningSchema = z.strictObject({
  version: z.literal(1).optional(),
  allreduce: z.record(worldSize, rules(TUNING_ALGORITHMS.allreduce)).optional(),
  allgather: z.record(worldSize, rules(TUNING_ALGORITHMS.allgather)).optional(),
  reducescatter: z.record(worldSize, rules(TUNING_ALGORITHMS.reducescatter)).optional(),
});
export type GlooTuning = z.infer<typeof tuningSchema>;

/** One rule per line, `<collective> <world size> <max bytes|inf> <algorithm>`, in a fixed order. */
export function canonicalTuning(t: GlooTuning): string {
  const lines: string[] = [];
  for (const coll of Object.keys(TUNING_ALGORITHMS) as TuningCollective[]) {
    const perSize = t[coll] ?? {};
    for (const size of Object.keys(perSize).map(Number).sort((a, b) => a - b)) {
      for (const r of perSize[String(size)]!) lines.push(`${coll} ${size} ${r.maxBytes ?? 'inf'} ${r.algorithm}`);
    }
  }
  return lines.map((l) => `${l}\n`).join('');
}

/** Validates a tuning document; a bad one throws ERR_INVALID_ARGUMENT naming where and why. */
export function parseTuning(doc: unknown, source: string): GlooTuning {
  const parsed = tuningSchema.safeParse(doc);
  if (parsed.success) return parsed.data;
  const why = parsed.error.issues.map((i) => `${i.path.join('.') || '(top level)'}: ${i.message}`).join('; ');
  throw new NcclNodeError('ERR_INVALID_ARGUMENT',
    `NCCL_NODE_GLOO_TUNING file ${source} is not a valid tuning table: expected {allreduce|allgather|reducescatter: ` +
    `{<world size>: [{maxBytes, algorithm}, ...]}}; ${why}`, { path: source });
}

/** The canonical table of the file NCCL_NODE_GLOO_TUNING names ('' when unset: the built-in table). */
export function loadGlooTuning(env: NodeJS.ProcessEnv = process.env): string {
  const path = env.NCCL_NODE_GLOO_TUNING;
  if (!path) return '';
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `NCCL_NODE_GLOO_TUNING file ${path} cannot be read: ${(e as Error).message}`, { path });
  }
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `NCCL_NODE_GLOO_TUNING file ${path} is not JSON: ${(e as Error).message}`, { path });
  }
  return canonicalTuning(parseTuning(doc, path));
}
