/**
 * In-memory checkpoints: TinyLM trained by train() on Gloo ranks snapshots into host
 * memory with a replica on a peer; a rank replaced by a fresh process restores from
 * the peer's replica, bit for bit, and training goes on with the losses of an
 * uninterrupted run (the reference, computed in the same processes); losing both
 * copies, or a damaged replica, falls back to the durable checkpoint; the budget
 * refuses a snapshot one byte too large.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { holders, planRestore, type Inventory } from '../../src/checkpoint/in-memory-plan.js';
import { freePort, runRanks } from '../helpers/ranks.js';

const root = mkdtempSync(join(tmpdir(), 'ckpt-inmem-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

type Report = Record<string, any>;

interface Scenario {
  world: number;
  localWorldSize: number;
  parallel: 'ddp' | 'fsdp';
  lose: number[];
  durableAt: number[];
  corrupt?: { holder: number; owner: number };
  budget?: boolean;
  model?: { vocab: number; dim: number; hidden: number; layers: number; seqLen: number; seed: number };
  files?: boolean;
}

/** ~0.4M parameters: a few MB of state, so the restore timings move some data. */
const MID = { vocab: 512, dim: 96, hidden: 384, layers: 2, seqLen: 8, seed: 5 };
const STEPS = 7, EVERY = 2, FAIL_AT = 5; // snapshots after steps 2 and 4; the failure after 5

/** All reports of a run, by phase then rank (a lost rank's replacement reports under the same rank). */
async function scenario(name: string, s: Scenario): Promise<Map<string, Report[]>> {
  const out = await runRanks('test/checkpoint/in-memory-worker.ts', s.world, {
    localWorldSize: s.localWorldSize, check: true, timeoutMs: 50_000,
    env: { NCCL_NODE_TIMEOUT_MS: '30000' },
    payload: { ...s, steps: STEPS, every: EVERY, failAt: FAIL_AT, dir: join(root, name), port2: await freePort() },
  });
  const by = new Map<string, Report[]>();
  for (const r of out.flatMap((o) => o.reports)) {
    const list = by.get(r.phase as string) ?? [];
    list.push(r);
    by.set(r.phase as string, list);
  }
  return by;
}

const one = (by: Map<string, Report[]>, phase: string, rank: number, extra: (r: Report) => boolean = () => true): Report => {
  const found = (by.get(phase) ?? []).filter((r) => r.rank === rank && extra(r));
  expect(found, `${phase} of rank ${rank}`).toHaveLength(1);
  return found[0]!;
};

describe('in-memory checkpoints', () => {
  it('places replicas on the next node at the same local rank (one node: the next rank)', () => {
    const two = [0, 0, 1, 1].map((node, r) => ({ node, localRank: r % 2 }));
    expect(holders(two)).toEqual([2, 3, 0, 1]);
    const three = [0, 0, 1, 1, 2, 2].map((node, r) => ({ node, localRank: r % 2 }));
    expect(holders(three)).toEqual([2, 3, 4, 5, 0, 1]);
    expect(holders([0, 0, 0].map((node, r) => ({ node, localRank: r })))).toEqual([1, 2, 0]);
    expect(holders([{ node: 0, localRank: 0 }])).toEqual([-1]);
  });

  it('plans one step for all ranks: own copy, else a replica, else a newer durable checkpoint', () => {
    const e = (owner: number, step: number, ok = true) => ({ owner, world: 2, step, bytes: 10, ok });
    const inv = (own: ReturnType<typeof e> | null, replicas: ReturnType<typeof e>[], rank: number, durable?: Inventory['durable']): Inventory =>
      ({ rank, place: { node: 0, localRank: rank }, own, replicas, ...(rank === 0 ? { durable: durable ?? null } : {}) });
    // Rank 1 lost its memory: its state comes from rank 0's replica.
    expect(planRestore([inv(e(0, 4), [e(1, 4)], 0), inv(null, [], 1)])).toMatchObject({ kind: 'memory', step: 4, from: [-1, 0] });
    // Steps differ (a snapshot that did not finish everywhere): the newest common one, rank 0's from rank 1's replica.
    expect(planRestore([inv(e(0, 6), [e(1, 4)], 0), inv(e(1, 4), [e(0, 4)], 1)])).toMatchObject({ kind: 'memory', step: 4, from: [1, -1] });
    // A damaged replica is rejected; the durable checkpoint is used.
    const bad = planRestore([inv(e(0, 4), [e(1, 4, false)], 0, { dir: 'd', step: 2 }), inv(null, [], 1)]);
    expect(bad).toMatchObject({ kind: 'disk', step: 2, rejected: [{ holder: 0, owner: 1, step: 4 }] });
    // A durable checkpoint newer than memory wins.
    expect(planRestore([inv(e(0, 4), [e(1, 4)], 0, { dir: 'd', step: 6 }), inv(e(1, 4), [e(0, 4)], 1)])).toMatchObject({ kind: 'disk', step: 6 });
    expect(planRestore([inv(null, [], 0), inv(null, [], 1)]).kind).toBe('none');
  });

  /** Every rank restored step 4 (rank 1 from `holder[1]`), bit for bit, held two copies again, and trained on like the reference. */
  function expectPeerRestore(by: Map<string, Report[]>, holder: number[]): void {
    const world = holder.length;
    const reference = one(by, 'reference', 0).losses as number[];
    for (let r = 0; r < world; r++) {
      const snap = one(by, 'snapshot', r, (x) => x.step === 4);
      expect(snap.holder).toBe(holder[r]);
      expect(snap.held.own).toBeGreaterThan(snap.dataBytes); // tensor bytes + meta + digest
      // Each rank holds its own snapshot plus the one of the rank it is the holder of.
      expect(snap.held.replicas).toBe(one(by, 'snapshot', holder.indexOf(r), (x) => x.step === 4).held.own);
      expect(snap.held.total).toBe(snap.held.own + snap.held.replicas);

      const restore = one(by, 'restore', r);
      expect(restore.replacement).toBe(r === 1);
      expect(restore.step).toBe(4);
      expect(restore.sources).toEqual(holder.map((_, q) => (q === 1 ? 'peer' : 'memory')));
      expect(restore.source).toBe(r === 1 ? 'peer' : 'memory');
      expect(restore.rejected).toEqual([]);
      expect(restore.restored).toBe(snap.hash); // parameters and optimizer state as saved
      expect(restore.disk.hash).toBe(snap.hash); // and as the durable checkpoint of the same step holds them
      // The replacement got back the replica it kept: every rank holds two copies again.
      expect(restore.held).toMatchObject({ step: 4, own: snap.held.own, replicas: snap.held.replicas });
      const second = one(by, 'second', r);
      expect(second.start).toBe(4);
      expect(second.losses).toEqual(reference.slice(4));
    }
    const peer = one(by, 'restore', 1);
    const f = (ms: number) => `${ms.toFixed(1)} ms`;
    console.log(`restore of the same step-4 state (${peer.held.own} bytes a rank, ${world} ranks), first / warm: ` +
      `peer memory ${f(peer.ms)} / ${f(peer.disk.peerWarmMs)}, durable checkpoint ${f(peer.disk.ms)} / ${f(peer.disk.diskWarmMs)}`);
  }

  it('FSDP, 2 nodes: rank 1 replaced by a fresh process restores from its replica on the next node, bit for bit; training goes on as if uninterrupted', async () => {
    const by = await scenario('peer', { world: 4, localWorldSize: 2, parallel: 'fsdp', lose: [1], durableAt: [4], model: MID });
    expectPeerRestore(by, [2, 3, 0, 1]);
  }, 60_000);

  it('DDP, 1 node: the replica is on the next rank; restored DDP replicas gather every rank\'s pieces', async () => {
    const by = await scenario('peer-ddp', { world: 2, localWorldSize: 2, parallel: 'ddp', lose: [1], durableAt: [4] });
    expectPeerRestore(by, [1, 0]);
  }, 60_000);

  it('the same with node-local snapshot files: survivors restore from their files, the replaced node\'s rank from the peer, and its files are written again', async () => {
    const by = await scenario('peer-files', { world: 4, localWorldSize: 2, parallel: 'fsdp', lose: [1], durableAt: [4], model: MID, files: true });
    expectPeerRestore(by, [2, 3, 0, 1]);
    // Rank 1's new node holds its own snapshot and the replica it keeps for rank 3, of the last step (6) only.
    const second = one(by, 'second', 1);
    expect(second.files).toHaveLength(2);
    expect(second.files[0]).toMatch(/^nccl-node-snapshot\.[0-9a-f]{16}\.rank1\.of3\.step6$/);
    expect(second.files[1]).toMatch(/^nccl-node-snapshot\.[0-9a-f]{16}\.rank1\.own\.step6$/);
    expect(second.held.total).toBe(second.held.own + second.held.replicas);
  }, 60_000);

  it('losing a rank and its replica holder falls back to the durable checkpoint of an earlier step', async () => {
    const by = await scenario('both', { world: 4, localWorldSize: 2, parallel: 'ddp', lose: [1, 3], durableAt: [2] });
    const reference = one(by, 'reference', 0).losses as number[];
    for (let r = 0; r < 4; r++) {
      const restore = one(by, 'restore', r);
      expect(restore).toMatchObject({ step: 2, source: 'disk', sources: ['disk', 'disk', 'disk', 'disk'], replacement: r === 1 || r === 3 });
      expect(restore.restored).toBe(one(by, 'snapshot', r, (x) => x.step === 2).hash);
      expect(restore.held.total).toBe(0); // survivors dropped their step-4 copies
      expect(one(by, 'second', r).losses).toEqual(reference.slice(2));
    }
  }, 60_000);

  it('a damaged replica fails its digest and is not used; the budget refuses a snapshot one byte too large; a rank that cannot snapshot fails it on all', async () => {
    const by = await scenario('corrupt', { world: 2, localWorldSize: 2, parallel: 'ddp', lose: [1], durableAt: [2], corrupt: { holder: 0, owner: 1 }, budget: true });
    const reference = one(by, 'reference', 0).losses as number[];
    for (let r = 0; r < 2; r++) {
      const restore = one(by, 'restore', r);
      expect(restore).toMatchObject({ step: 2, source: 'disk', rejected: [{ holder: 0, owner: 1, step: 4 }] });
      expect(restore.rejected[0].error).toMatch(/CRC32C/);
      expect(restore.restored).toBe(one(by, 'snapshot', r, (x) => x.step === 2).hash);
      expect(one(by, 'second', r).losses).toEqual(reference.slice(2));

      const b = one(by, 'budget', r);
      const max = Math.max(...(b.needs as number[]));
      expect(b.refused.overBudget).toBe(true);
      expect(b.refused.neededBytes).toBe(max);
      expect(b.refused.budgetBytes).toBe(max - 1);
      expect(b.refused.thisRankBytes).toBe(b.need);
      expect(b.refused.message).toMatch(/over budget/);
      expect(b.skipped).toEqual({ taken: false, held: 0 });
      expect(b.failed).toMatch(/^in-memory snapshot: rank 1 failed: .*train\.step must be a non-negative integer, received -3/);
      expect(b.fits).toMatchObject({ taken: true, held: { total: b.need, budgetBytes: max } });
    }
  }, 60_000);
});
