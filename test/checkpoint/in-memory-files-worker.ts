/**
 * A rank of the node-local snapshot file tests (two ranks, one node). Trains the tiny
 * TinyLM 4 steps with in-memory snapshots after steps 2 and 4 kept in files of
 * `dir` (job "A") and a durable checkpoint of step 2, recording a SHA-256 of each
 * snapshot's state. Then, in the same process, new InMemoryCheckpoint instances (what
 * a restarted process has) restore into a fresh model: from the files; with rank 1's
 * own file damaged; with it and its replica damaged; as another job (B) while job A's
 * files are there; and a snapshot whose files one rank cannot write.
 */
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { init } from '../../src/comm/init.js';
import { InMemoryCheckpoint, trainingState, type CheckpointState, type RestoreResult } from '../../src/checkpoint/index.js';
import { jobKey, removeJobFiles, SnapshotFiles } from '../../src/checkpoint/in-memory-files.js';
import { MODELS, train, type TrainConfig } from '../../src/train/loop.js';
import { hashState } from './hash-state.js';
import { readPayload, report } from '../helpers/ranks.js';

const p = readPayload<{ dir: string; ckpt: string; notADir: string }>();

const base = (steps: number): TrainConfig => ({
  model: MODELS.tiny!, steps, globalBatch: 4, microBatches: 1, parallel: { kind: 'ddp' },
  optimizer: { kind: 'adamw', lr: 1e-2, weightDecay: 0.01 }, clipNorm: 1, dataSeed: 7,
});
const comm = await init();
const rank = comm.rank;
const files = (job: string) => readdirSync(p.dir).filter((n) => n.includes(jobKey(job))).sort();
const sizes = (job: string) => Object.fromEntries(files(job).map((n) => [n, statSync(join(p.dir, n)).size]));
const flip = (file: string) => {
  const b = readFileSync(file);
  b[7] = b[7]! ^ 0x20;
  writeFileSync(file, b);
};

// Snapshots after steps 2 and 4 into job A's files; a durable checkpoint of step 2.
const a = new InMemoryCheckpoint({ dir: p.dir, job: 'A' });
const hashes: Record<number, string> = {};
const snap = a.snapshot.bind(a);
a.snapshot = async (c, state) => {
  hashes[state.train.step] = hashState(state.tensors, state.train.optimizerStep);
  return snap(c, state);
};
mkdirSync(p.ckpt, { recursive: true });
const first = await train(comm, { ...base(4), ckpt: { dir: p.ckpt, at: [2], overlap: false }, inMemory: { store: a, every: 2 } });
await comm.allGatherObject(0); // every rank committed step 4 before the directory is listed
report({ phase: 'snapshot', rank, hashes, held: a.held(), sizes: sizes('A'), directory: a.directory });

/** A fresh model restored by a new instance (a restarted process): its source, what it rejected, the state's hash. */
async function restart(job: string, options: { staleAfterMs?: number } = {}) {
  const store = new InMemoryCheckpoint({ dir: p.dir, job, ...options });
  let got: { r: RestoreResult; hash: string } | null = null;
  await train(comm, {
    ...base(4), ckpt: { dir: p.ckpt, at: [] },
    inMemory: {
      store, every: 100, restore: true,
      onRestore(r, dp) {
        const sd = dp.stateDict() as CheckpointState & { optimizerStep: number };
        got = { r, hash: hashState(sd.tensors, sd.optimizerStep) };
      },
    },
  });
  const { r, hash } = got!;
  await comm.allGatherObject(0);
  return { step: r.step, source: r.source, sources: r.sources, rejected: r.rejected, hash, held: store.held(), files: files(job) };
}

report({ phase: 'files', rank, ...(await restart('A')) });

const sf = new SnapshotFiles(p.dir, 'A');
// Rank 1's own file damaged: its state comes from rank 0's replica (and is written back).
if (rank === 1) flip(sf.path(1, 1, 4));
report({ phase: 'torn-own', rank, ...(await restart('A')) });

// Its own file and the replica damaged: every rank goes to the durable checkpoint of step 2.
if (rank === 1) flip(sf.path(1, 1, 4));
if (rank === 0) flip(sf.path(0, 1, 4));
report({ phase: 'torn-both', rank, ...(await restart('A')) });

// Job A's files again (step 4), then job B restores in the same directory: A's are never read.
const again = new InMemoryCheckpoint({ dir: p.dir, job: 'A' });
await again.snapshot(comm, trainingState(first.dp, { step: 4, dataSeed: 7 }));
await comm.allGatherObject(0);
report({ phase: 'other-job', rank, ...(await restart('B')), filesA: files('A') });
// Job B again, where job A's files count as stale at once: they are removed on first use.
report({ phase: 'stale', rank, ...(await restart('B', { staleAfterMs: 0 })), filesA: files('A') });

// Rank 1 cannot write its files: the snapshot fails on every rank, which keep their previous step.
const ok = new InMemoryCheckpoint({ dir: p.dir, job: 'C' });
const keep = await ok.snapshot(comm, trainingState(first.dp, { step: 4, dataSeed: 7 }));
let failed = '';
const cstore = rank === 1 ? new InMemoryCheckpoint({ dir: p.notADir, job: 'C' }) : ok;
try {
  await cstore.snapshot(comm, trainingState(first.dp, { step: 5, dataSeed: 7 }));
} catch (err) {
  failed = `${(err as { code?: string }).code}: ${(err as Error).message}`;
}
await comm.allGatherObject(0);
report({ phase: 'no-write', rank, failed, keptStep: keep.step, held: ok.held(), files: files('C') });
await comm.allGatherObject(0); // every rank listed job C's files before rank 0 removes them
// The job ended: all its files go.
report({ phase: 'cleanup', rank, removed: rank === 0 ? removeJobFiles(p.dir, 'C') : 0 });
await comm.allGatherObject(0);
report({ phase: 'after', rank, left: readdirSync(p.dir) });
await comm.destroy();
