/**
 * What a committed checkpoint's digests protect: edits to the manifest that its
 * schema still accepts, bytes appended to a shard, a flipped safetensors header,
 * pieces that leave a gap, a newest checkpoint missing a shard (the fallback must
 * not race its failed reads). Two 2-rank checkpoints are saved once; each case
 * edits a copy.
 */
import { appendFileSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { load, verify } from '../../src/checkpoint/index.js';
import { decodeHeader } from '../../src/checkpoint/format.js';
import { isNcclNodeError } from '../../src/errors.js';
import { describeRanks, runRanks } from '../helpers/ranks.js';
import { BIG_N, bigOf, fullTargets, wrongTensors } from './integrity-fixture.js';

const scratch = mkdtempSync(join(tmpdir(), 'ckpt-integrity-'));
const base = join(scratch, 'base');
const big = join(scratch, 'big');
const STEP1 = 'step-0000000001';
const STEP2 = 'step-0000000002';
const R0 = 'rank-00000-of-00002.safetensors';
const R1 = 'rank-00001-of-00002.safetensors';

beforeAll(async () => {
  for (const [dir, env] of [[base, {}], [big, { BIG: '1' }]] as const) {
    const res = await runRanks('test/checkpoint/integrity-worker.ts', 2, { env: { CKPT_DIR: dir, STEPS: '1,2', ...env }, timeoutMs: 60_000 });
    if (res.some((r) => r.code !== 0)) throw new Error(describeRanks(res));
  }
}, 120_000);
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

let n = 0;
function copy(from = base): string {
  const d = join(scratch, `case-${n++}`);
  cpSync(from, d, { recursive: true });
  return d;
}

function edit(file: string, from: string, to: string): void {
  const text = readFileSync(file, 'utf8');
  expect(text.split(from).length, `${from} occurs once in ${file}`).toBe(2);
  writeFileSync(file, text.replace(from, to));
}

async function loadError(dir: string): Promise<{ code?: string; message: string; details: Record<string, unknown> }> {
  const err = await load(dir, fullTargets()).then(() => new Error('loaded without error'), (e: unknown) => e);
  return err as { code?: string; message: string; details: Record<string, unknown> };
}

/** The newest checkpoint is rejected by verify and load; fallback gives step 1, exactly. */
async function rejectedWithFallback(root: string, file: string, tensor?: RegExp): Promise<void> {
  const v = await verify(join(root, STEP2));
  expect(v.problems.length, 'verify finds a problem').toBeGreaterThan(0);
  expect(v.problems.some((p) => p.file === file && (!tensor || tensor.test(p.tensor))), JSON.stringify(v.problems)).toBe(true);
  const err = await loadError(join(root, STEP2));
  expect(err.code, err.message).toBe('ERR_CHECKSUM');
  expect(err.details.file).toBe(file);
  if (tensor) expect(err.details.tensor).toMatch(tensor);
  const t = fullTargets();
  const r = await load(root, t, { fallback: true });
  expect(r.step).toBe(1);
  expect(r.train.step).toBe(1);
  expect(r.skipped.map((s) => s.dir)).toEqual([join(root, STEP2)]);
  expect(wrongTensors(t, 1)).toEqual([]);
}

describe('checkpoint integrity', () => {
  it('an intact checkpoint verifies and loads exactly', async () => {
    const t = fullTargets();
    const r = await load(base, t);
    expect(r.step).toBe(2);
    expect(r.train).toEqual({ step: 2, rng: [2, 7], cursor: { epoch: 1, index: 6 } });
    expect(wrongTensors(t, 2)).toEqual([]);
    expect((await verify(join(base, STEP2))).problems).toEqual([]);
  });

  // Single-character edits the manifest's schema still accepts.
  const edits: [string, string, string][] = [
    ['top-level step', '"step":2,"worldSize"', '"step":3,"worldSize"'],
    ['train.step', '"train":{"step":2', '"train":{"step":3'],
    ['train.rng', '"rng":[2,7]', '"rng":[2,8]'],
    ['a metadata value', '"codeVersion":"c1"', '"codeVersion":"c2"'],
    ['a piece offset (leaves an element unwritten)', '"offset":1869,', '"offset":1868,'],
    ['a tensor name', '"layer.bf"', '"layer.bg"'],
  ];
  for (const [what, from, to] of edits) {
    it(`an edit to the manifest (${what}) fails verify and load with ERR_CHECKSUM; fallback loads step 1`, async () => {
      const root = copy();
      edit(join(root, STEP2, 'manifest.json'), from, to);
      await rejectedWithFallback(root, 'manifest.json');
    });
  }

  it('bytes appended to a shard fail verify and load', async () => {
    const root = copy();
    appendFileSync(join(root, STEP2, R1), Buffer.from([0]));
    await rejectedWithFallback(root, R1);
  });

  it('a flipped byte in a tensor name of a safetensors header fails verify and load', async () => {
    const root = copy();
    const f = join(root, STEP2, R0);
    const bytes = readFileSync(f);
    const at = bytes.indexOf('layer.w');
    expect(at).toBeGreaterThan(8);
    bytes[at + 6]! ^= 0x01; // layer.w -> layer.v: still JSON, still a valid safetensors file
    writeFileSync(f, bytes);
    expect(decodeHeader(new Uint8Array(bytes), f).tensors.has('layer.v')).toBe(true);
    await rejectedWithFallback(root, R0, /header/);
  });

  it('a newest checkpoint missing a shard: fallback loads step 1 exactly, and a failed load leaves the targets alone', async () => {
    for (let trial = 0; trial < 10; trial++) {
      const root = copy(big);
      rmSync(join(root, STEP2, R1));
      const t = { ...fullTargets(), big: { data: new Float32Array(BIG_N), dtype: 'float32' as const, offset: 0 } };
      const r = await load(root, t, { fallback: true });
      expect(r.step).toBe(1);
      // Reads of the failed attempt, if any were left running, would land by now.
      await new Promise((res) => setTimeout(res, 50));
      expect(wrongTensors(t, 1), `trial ${trial}`).toEqual([]);
      expect(Buffer.compare(Buffer.from(t.big.data.buffer), Buffer.from(bigOf(1).buffer)), `trial ${trial}: big`).toBe(0);

      const u = { ...fullTargets(), big: { data: new Float32Array(BIG_N).fill(-1), dtype: 'float32' as const, offset: 0 } };
      const err = await load(join(root, STEP2), u).catch((e: unknown) => e);
      expect(isNcclNodeError(err, 'ERR_IO'), String(err)).toBe(true);
      await new Promise((res) => setTimeout(res, 50));
      expect(u.big.data.every((x) => x === -1), `trial ${trial}: the failed load wrote into a target`).toBe(true);
    }
  });
});
