/**
 * What a committed checkpoint's digests protect: edits to the manifest that its
 * schema still accepts, bytes appended to a shard, a flipped safetensors header,
 * pieces that leave a gap, a newest checkpoint missing a shard (the fallback must
 * not race its failed reads). Two 2-rank checkpoints are saved once; each case
 * edits a copy.
 */
import { spawnSync } from 'node:child_process';
import { appendFileSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Checkpointer, load, verify } from '../../src/checkpoint/index.js';
import { decodeHeader } from '../../src/checkpoint/safetensors.js';
import { sealManifest, type Manifest } from '../../src/checkpoint/manifest.js';
import { isNcclNodeError } from '../../src/errors.js';
import { describeRanks, repoRoot, runRanks } from '../helpers/ranks.js';
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

  it('`nccl-node ckpt verify` exits 1 on an edited manifest, naming it, and 0 on the intact checkpoint', () => {
    const root = copy();
    const cli = (dir: string) => spawnSync(process.execPath, ['bin/nccl-node.js', 'ckpt', 'verify', dir], { cwd: repoRoot, encoding: 'utf8', timeout: 60_000 });
    const ok = cli(join(root, STEP2));
    expect(ok.status, ok.stderr).toBe(0);
    expect(ok.stdout).toMatch(/OK \(step 2, 5 tensors/);
    edit(join(root, STEP2, 'manifest.json'), '"rng":[2,7]', '"rng":[2,8]');
    const bad = cli(join(root, STEP2));
    expect(bad.status).toBe(1);
    expect(bad.stderr).toMatch(/CORRUPT manifest\.json: .*commit\.json says/);
  });

  // A manifest rewritten *with* a matching commit marker (a save bug, a foreign writer): the layout checks still hold.
  const reseals: [string, (m: Manifest) => void, RegExp][] = [
    ['a gap between pieces', (m) => { m.tensors['layer.w']!.shards[1]!.offset += 1; m.tensors['layer.w']!.shards[1]!.length -= 1; }, /elements \[1869, 1870\) are in no saved piece/],
    ['overlapping pieces', (m) => { m.tensors['layer.w']!.shards[1]!.offset -= 1; }, /saved pieces overlap at element 1868/],
    ['a piece past the end', (m) => { m.tensors['opt.f64']!.shards[1]!.length += 1; }, /cover 1500 of 1500 elements and run past its end|outside/],
    ['a chunk CRC missing', (m) => { m.tensors['opt.f64']!.shards[0]!.chunks.pop(); }, /chunk CRCs for/],
    ['file bytes in no piece', (m) => { m.files[0]!.headerBytes -= 8; }, /are in no piece/],
  ];
  for (const [what, change, why] of reseals) {
    it(`a resealed manifest with ${what} is ERR_CHECKSUM; fallback loads step 1`, async () => {
      const root = copy();
      const dir = join(root, STEP2);
      const m = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as Manifest;
      change(m);
      const sealed = sealManifest(m);
      writeFileSync(join(dir, 'manifest.json'), sealed.manifest);
      writeFileSync(join(dir, 'commit.json'), sealed.commit);
      await rejectedWithFallback(root, 'manifest.json');
      expect((await loadError(dir)).message).toMatch(why);
    });
  }

  it('a save whose ranks leave elements of a tensor unsaved is refused', async () => {
    const ck = await Checkpointer.create(join(scratch, `gap-${n++}`));
    const h = await ck.save({ tensors: { t: { data: new Float32Array(10), globalShape: [12], offset: 2 } }, train: { step: 1 } });
    await expect(h.committed).rejects.toThrow(/no rank saved elements \[0, 2\)/);
  });

  it('damage to the second copy of a replicated piece: verify names it; load reads the other copy, exactly', async () => {
    const root = join(scratch, `repl-${n++}`);
    const res = await runRanks('test/checkpoint/save-worker.ts', 2, { env: { CKPT_DIR: root, STEPS: '4' }, timeoutMs: 60_000 });
    if (res.some((r) => r.code !== 0)) throw new Error(describeRanks(res));
    const dir = join(root, 'step-0000000004');
    const m = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as Manifest;
    const rep = m.tensors['replicated.table']!.replicas;
    expect(rep.length).toBe(1);
    const f = join(dir, rep[0]!.file);
    const bytes = readFileSync(f);
    bytes[rep[0]!.dataOffset + 5]! ^= 0x40;
    writeFileSync(f, bytes);
    const v = await verify(dir);
    expect(v.problems.map((p) => [p.file, p.tensor])).toEqual([[rep[0]!.file, 'replicated.table']]);
    const table = new Int32Array(4);
    await load(dir, { 'replicated.table': { data: table, offset: 0 } });
    expect([...table]).toEqual([1, 2, 3, 4]);
  });

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
    for (let trial = 0; trial < 5; trial++) {
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
