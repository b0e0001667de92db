/** Saves with 4, 3 and 2 Gloo ranks, loads at other world sizes in-process: bit-exact. */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { load, readManifest, latest } from '../../src/checkpoint/index.js';
import { describeRanks, runRanks } from '../helpers/ranks.js';
import { TENSORS, numelOf, shardOf } from './fixture.js';

const root = mkdtempSync(join(tmpdir(), 'ckpt-reshard-'));
const dirs: Record<number, string> = {};

beforeAll(async () => {
  for (const world of [4, 3, 2]) {
    dirs[world] = join(root, `w${world}`);
    const res = await runRanks('test/checkpoint/save-worker.ts', world, { env: { CKPT_DIR: dirs[world]!, STEPS: '5' }, timeoutMs: 60_000 });
    if (res.some((r) => r.code !== 0)) throw new Error(describeRanks(res));
  }
}, 180_000);
afterAll(() => rmSync(root, { recursive: true, force: true }));

async function loadAt(dir: string, world: number): Promise<void> {
  for (let rank = 0; rank < world; rank++) {
    const targets: Record<string, { data: Float32Array; offset: number }> = {};
    for (const name of TENSORS) {
      const shard = Math.ceil(numelOf(name) / world);
      targets[name] = { data: new Float32Array(shard).fill(NaN), offset: rank * shard };
    }
    const table = new Int32Array(4);
    const r = await load(dir, { ...targets, 'replicated.table': { data: table, offset: 0 } });
    expect(r.step).toBe(5);
    expect(r.train).toEqual({ step: 5, rng: [5, 42], dataCursor: { epoch: 0, index: 40 } });
    expect([...table]).toEqual([1, 2, 3, 5]);
    for (const name of TENSORS) {
      const want = shardOf(name, rank, world, 5);
      expect(new Uint32Array(targets[name]!.data.buffer)).toEqual(new Uint32Array(want.buffer));
    }
  }
}

describe('resharding on load', () => {
  it('writes one safetensors file per rank and a manifest with global shapes', async () => {
    const m = await readManifest((await latest(dirs[4]!))!);
    expect(m.worldSize).toBe(4);
    expect(m.files.map((f) => f.file)).toEqual([0, 1, 2, 3].map((r) => `rank-0000${r}-of-00004.safetensors`));
    expect(m.tensors['unit3.param']!.globalShape).toEqual([3]);
    expect(m.tensors['unit3.param']!.shards.length).toBe(3); // 3 elements over 4 ranks: the last owns only padding
    expect(m.tensors['replicated.table']!.shards.length).toBe(1);
    expect(m.metadata).toMatchObject({ codeVersion: 'test', dataVersion: 'v1' });
  });
  it('4 -> 2', () => loadAt(dirs[4]!, 2));
  it('2 -> 4', () => loadAt(dirs[2]!, 4));
  it('3 -> 2', () => loadAt(dirs[3]!, 2));
  it('same world size (4 -> 4, 3 -> 3) and down to 1', async () => {
    await loadAt(dirs[4]!, 4);
    await loadAt(dirs[3]!, 3);
    await loadAt(dirs[3]!, 1);
  });
});
