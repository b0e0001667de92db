/**
 * DeviceMesh at 4 ranks on two simulated nodes of 2 (LOCAL_WORLD_SIZE=2): tp
 * groups are consecutive local ranks, dp/replicate groups cross nodes; and
 * hybrid sharding (replicate 2 x dp 2, ZeRO-3) matches the reference.
 */
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { meshGroup } from '../../src/runtime/mesh.js';
import { runRanks } from '../helpers/ranks.js';
import { concat, maxRelDiff } from './helpers.js';
import { baseConfig, runAll } from './cases.js';
import { referenceTrain } from './reference.js';

const WORKER = fileURLToPath(new URL('./mesh-worker.ts', import.meta.url));

it('lays out dp x tp = 2 x 2 with tp inside a node, and rejects bad meshes', async () => {
  const out = await runRanks<{ rank: number; groups: Record<string, number[]>; errors: Record<string, string> }>(
    WORKER, 4, { payload: { dims: { dp: 2, tp: 2 } }, check: true, timeoutMs: 40_000, localWorldSize: 2 });
  const byRank = out.map((o) => o.result!);
  expect(byRank.map((r) => r.groups.tp)).toEqual([[0, 1], [0, 1], [2, 3], [2, 3]]);
  expect(byRank.map((r) => r.groups.dp)).toEqual([[0, 2], [1, 3], [0, 2], [1, 3]]);
  expect(byRank.map((r) => r.groups.pp)).toEqual([[0], [1], [2], [3]]);
  expect(byRank.map((r) => r.groups.dpAll)).toEqual([[0, 2], [1, 3], [0, 2], [1, 3]]);
  for (const r of byRank) expect(r.errors).toEqual({ spansNodes: 'ERR_INVALID_ARGUMENT', wrongProduct: 'ERR_INVALID_ARGUMENT' });
}, 45_000);

it('meshGroup: pp outermost, replicate outside dp', () => {
  const sizes = { tp: 2, dp: 2, replicate: 2, pp: 2 };
  expect(meshGroup(5, sizes, 'tp')).toEqual([4, 5]);
  expect(meshGroup(5, sizes, 'dp')).toEqual([5, 7]);
  expect(meshGroup(5, sizes, 'replicate')).toEqual([1, 5]);
  expect(meshGroup(5, sizes, 'pp')).toEqual([5, 13]);
});

it('hybrid sharding (replicate 2 x dp 2, ZeRO-3) matches the single-process reference', async () => {
  const cfg = baseConfig({ parallel: { kind: 'fsdp', stage: 3 }, mesh: { replicate: 2, dp: 2 }, steps: 2 });
  const [run] = await runAll(4, [cfg], 100_000);
  const ref = await referenceTrain(cfg);
  expect(maxRelDiff(run!.params, concat(ref.params))).toBeLessThan(1e-4);
  // Shards are over 2 ranks, not 4: each rank holds half the optimizer state.
  expect(run!.memory.optimizer).toBeGreaterThan(0);
}, 120_000);
