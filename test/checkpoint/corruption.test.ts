/**
 * Random damage to a committed checkpoint: a flipped byte in any file of it (shards,
 * manifest, commit marker), a truncation, appended bytes, a deleted file. verify and
 * load must catch every one, naming the file (and, inside a shard, the tensor or
 * the header), and load with fallback must return the previous checkpoint exactly.
 * Seeded: CKPT_FUZZ_SEED replays a run, CKPT_FUZZ_TRIALS sets how many.
 * One 2-rank save of two checkpoints; each trial damages a copy.
 */
import { appendFileSync, cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { load, verify } from '../../src/checkpoint/index.js';
import { decodeHeader, headerLength } from '../../src/checkpoint/safetensors.js';
import { describeRanks, runRanks } from '../helpers/ranks.js';
import { fullTargets, prng, wrongTensors } from './integrity-fixture.js';

const SEED = Number(process.env.CKPT_FUZZ_SEED ?? 20261124);
const TRIALS = Number(process.env.CKPT_FUZZ_TRIALS ?? 140);
const STEP2 = 'step-0000000002';

const scratch = mkdtempSync(join(tmpdir(), 'ckpt-corrupt-'));
const base = join(scratch, 'base');
/** Each file of step 2: its size and, for shards, which tensor each byte range holds. */
const files: { name: string; size: number; header?: number; ranges?: { name: string; begin: number; end: number }[] }[] = [];

beforeAll(async () => {
  const res = await runRanks('test/checkpoint/integrity-worker.ts', 2, { env: { CKPT_DIR: base, STEPS: '1,2' }, timeoutMs: 60_000 });
  if (res.some((r) => r.code !== 0)) throw new Error(describeRanks(res));
  for (const name of readdirSync(join(base, STEP2)).sort()) {
    const bytes = new Uint8Array(readFileSync(join(base, STEP2, name)));
    if (!name.endsWith('.safetensors')) {
      files.push({ name, size: bytes.length });
      continue;
    }
    const st = decodeHeader(bytes, name);
    const ranges = [...st.tensors].map(([t, r]) => ({ name: t, begin: r.begin, end: r.end }));
    files.push({ name, size: bytes.length, header: 8 + headerLength(bytes, name), ranges });
  }
}, 120_000);
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** What a report about damage starting at byte `at` of `f` must name as the tensor. */
function tensorAt(f: (typeof files)[number], at: number): RegExp {
  if (at < f.header!) return /header/;
  if (at >= f.size) return /past the last tensor/;
  const r = f.ranges!.find((x) => at >= x.begin && at < x.end)!;
  return new RegExp(`^${r.name.replace('.', '\\.')}$`);
}

const KINDS = ['flip', 'flip', 'flip', 'truncate', 'append', 'delete'] as const;

describe('random damage to a committed checkpoint', () => {
  it(`verify and load catch every one; fallback loads the previous checkpoint exactly (${TRIALS} trials, seed ${SEED})`, async () => {
    expect(files.map((f) => f.name)).toContain('manifest.json');
    const rand = prng(SEED);
    const pick = (n: number) => Math.floor(rand() * n);
    for (let trial = 0; trial < TRIALS; trial++) {
      const root = join(scratch, `t${trial}`);
      cpSync(base, root, { recursive: true });
      const kind = KINDS[trial % KINDS.length]!;
      // Shards are most of the bytes; every third trial picks one of the small files.
      const small = files.filter((f) => !f.ranges);
      const f = trial % 3 === 0 ? small[pick(small.length)]! : files.filter((x) => x.ranges)[pick(2)]!;
      const path = join(root, STEP2, f.name);
      let at = 0;
      if (kind === 'flip') {
        at = pick(f.size);
        const b = readFileSync(path);
        b[at]! ^= 1 + pick(255);
        writeFileSync(path, b);
      } else if (kind === 'truncate') {
        at = pick(f.size);
        truncateSync(path, at);
      } else if (kind === 'append') {
        at = f.size;
        appendFileSync(path, Buffer.from(Array.from({ length: 1 + pick(64) }, () => pick(256))));
      } else {
        rmSync(path);
      }
      const what = `trial ${trial} (seed ${SEED}): ${kind} ${f.name} at ${at} of ${f.size}`;
      const tensor = f.ranges && kind !== 'delete' ? tensorAt(f, at) : undefined;
      const inFile = f.ranges?.map((r) => r.name) ?? [];

      const v = await verify(join(root, STEP2));
      const named = v.problems.filter((p) => p.file === f.name);
      expect(named.length, `${what}: verify: ${JSON.stringify(v.problems)}`).toBeGreaterThan(0);
      if (tensor) expect(named.some((p) => tensor.test(p.tensor)), `${what}: verify names ${tensor}: ${JSON.stringify(named)}`).toBe(true);
      if (kind === 'delete' && f.ranges) expect(named.every((p) => inFile.includes(p.tensor)), `${what}: ${JSON.stringify(named)}`).toBe(true);

      const err = (await load(join(root, STEP2), fullTargets()).then(() => null, (e: unknown) => e)) as
        { code?: string; message: string; details: Record<string, unknown> } | null;
      expect(err, `${what}: load succeeded`).not.toBeNull();
      expect(['ERR_CHECKSUM', 'ERR_IO'], `${what}: ${err!.message}`).toContain(err!.code);
      expect(err!.message, what).toContain(f.name);
      if (f.ranges) expect(err!.details.file, `${what}: ${err!.message}`).toBe(f.name);
      if (tensor) expect(String(err!.details.tensor), `${what}: ${err!.message}`).toMatch(tensor);
      if (kind === 'delete' && f.ranges) expect(inFile, `${what}: ${err!.message}`).toContain(err!.details.tensor);

      const t = fullTargets();
      const r = await load(root, t, { fallback: true });
      expect(r.step, what).toBe(1);
      expect(wrongTensors(t, 1), what).toEqual([]);
      rmSync(root, { recursive: true, force: true });
    }
    expect(statSync(base).isDirectory()).toBe(true);
  }, 120_000);
});
