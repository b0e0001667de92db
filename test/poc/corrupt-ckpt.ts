/**
 * Rewrites a committed checkpoint with one float32 element of one tensor moved by
 * one unit in the last place, the rest (other tensors, train state, metadata)
 * unchanged: a well-formed checkpoint whose CRCs match its new contents, holding
 * state that differs from what was saved by the smallest amount there is.
 */
import { rename, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { load, readManifest, save, stepDirName, type LoadTarget } from '../../src/checkpoint/index.js';
import { arrayTypeOf, type DType } from '../../src/dtypes.js';

export async function corruptOneUlp(dir: string, tensor: string, index = 0): Promise<{ before: number; after: number }> {
  const m = await readManifest(dir);
  const data: Record<string, LoadTarget> = {};
  for (const [name, t] of Object.entries(m.tensors)) data[name] = { data: new (arrayTypeOf(t.dtype as DType))(t.globalShape.reduce((a, b) => a * b, 1)), dtype: t.dtype as DType, offset: 0 };
  await load(dir, data);
  const target = data[tensor]!.data as Float32Array;
  const bits = new Uint32Array(target.buffer, target.byteOffset, target.length);
  const before = target[index]!;
  bits[index] = bits[index]! ^ 1;
  const after = target[index]!;
  const tensors = Object.fromEntries(Object.entries(m.tensors).map(([name, t]) => [name, { ...data[name]!, globalShape: t.globalShape }]));
  const tmp = join(dirname(dir), '.corrupt');
  await rm(tmp, { recursive: true, force: true });
  await (await save({ tensors, train: m.train as { step: number }, metadata: m.metadata }, tmp)).committed;
  await rm(dir, { recursive: true });
  await rename(join(tmp, stepDirName(m.step)), dir);
  await rm(tmp, { recursive: true, force: true });
  return { before, after };
}
