/**
 * A rank of the in-memory checkpoint tests. Trains the tiny TinyLM uninterrupted
 * (the reference losses), then again with in-memory snapshots (and durable saves at
 * `durableAt`) up to `failAt`, recording a SHA-256 of the state each snapshot saw.
 * Then the "failure": every rank drops the communicator; the ranks in `lose` exit
 * after starting a fresh process for their rank (an empty store: its memory is gone),
 * the others keep theirs. All join a new communicator (port2) and train on to
 * `steps` with `inMemory.restore`, reporting the restore and the losses.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { init } from '../../src/comm/init.js';
import { InMemoryCheckpoint, loadTraining, stepDirName, trainingState, type CheckpointState } from '../../src/checkpoint/index.js';
import { isNcclNodeError } from '../../src/errors.js';
import { MODELS, train, type TrainConfig } from '../../src/train/loop.js';
import type { TinyLMConfig } from '../../src/models/tiny-lm/tiny-lm.js';
import { hashState } from './hash-state.js';
import { readPayload, report } from '../helpers/ranks.js';

interface Payload {
  parallel: 'ddp' | 'fsdp';
  steps: number;
  every: number;
  failAt: number;
  durableAt: number[];
  lose: number[];
  dir: string;
  port2: number;
  /** Flip a byte of the replica `holder` keeps for `owner` before the failure. */
  corrupt?: { holder: number; owner: number };
  budget?: boolean;
  /** Default: the tiny model. */
  model?: TinyLMConfig;
  /** Keep the frames in node-local files (a directory per node; a replacement's node is a new one, its files gone). */
  files?: boolean;
}

const p = readPayload<Payload>();
const replacement = process.env.ROLE === 'replacement';

const base = (steps: number): TrainConfig => ({
  model: p.model ?? MODELS.tiny!, steps, globalBatch: 4, microBatches: 1,
  parallel: p.parallel === 'fsdp' ? { kind: 'fsdp', stage: 3 } : { kind: 'ddp' },
  optimizer: { kind: 'adamw', lr: 1e-2, weightDecay: 0.01 }, clipNorm: 1, dataSeed: 7,
});

const node = Math.floor(Number(process.env.RANK) / Number(process.env.LOCAL_WORLD_SIZE));
const store = new InMemoryCheckpoint(p.files ? { dir: join(p.dir, 'shm', `node${node}${replacement ? '-new' : ''}`), job: 'in-memory-test' } : { dir: false });
if (!replacement) {
  const comm = await init();
  const ref = await train(comm, base(p.steps));
  report({ phase: 'reference', rank: comm.rank, losses: ref.losses });

  const snap = store.snapshot.bind(store);
  store.snapshot = async (c, state) => {
    const hash = hashState(state.tensors, state.train.optimizerStep);
    const r = await snap(c, state);
    const dataBytes = Object.values(state.tensors).reduce((a, t) => a + (t.length ?? t.data.length) * 4, 0);
    report({ phase: 'snapshot', rank: c.rank, step: state.train.step, hash, dataBytes, held: r.held, holder: r.holder });
    return r;
  };
  mkdirSync(p.dir, { recursive: true });
  const first = await train(comm, { ...base(p.failAt), ckpt: { dir: p.dir, at: p.durableAt, overlap: false }, inMemory: { store, every: p.every } });
  report({ phase: 'first', rank: comm.rank, losses: first.losses });

  if (p.budget) {
    // The same state under budgets just below and at what the snapshot needs.
    const state = trainingState(first.dp, { step: p.failAt });
    const need = (await new InMemoryCheckpoint().snapshot(comm, state)).held.total;
    const needs = await comm.allGatherObject(need);
    const tight = Math.max(...needs) - 1;
    let refused: Record<string, unknown> = {};
    try {
      await new InMemoryCheckpoint({ budgetBytes: tight }).snapshot(comm, state);
    } catch (err) {
      if (!isNcclNodeError(err, 'ERR_UNAVAILABLE')) throw err;
      refused = { message: err.message, ...err.details };
    }
    const skipStore = new InMemoryCheckpoint({ budgetBytes: tight, overBudget: 'skip' });
    const skipped = await skipStore.snapshot(comm, state);
    const fits = await new InMemoryCheckpoint({ budgetBytes: tight + 1 }).snapshot(comm, state);
    // A rank that cannot take part (a bad step on rank 1 only) fails the snapshot on every rank, naming itself.
    let failed = '';
    try {
      await new InMemoryCheckpoint().snapshot(comm, trainingState(first.dp, { step: comm.rank === 1 ? -3 : p.failAt }));
    } catch (err) {
      if (!isNcclNodeError(err, 'ERR_INVALID_ARGUMENT')) throw err;
      failed = err.message;
    }
    report({ phase: 'budget', rank: comm.rank, failed, need, needs, tight, refused, skipped: { taken: skipped.taken, held: skipped.held.total }, fits: { taken: fits.taken, held: fits.held } });
  }

  if (p.corrupt && comm.rank === p.corrupt.holder) {
    const frame = store.frames().replicas.get(p.corrupt.owner)!;
    frame[5] = frame[5]! ^ 0x10;
  }
  const rank = comm.rank;
  await comm.destroy();
  if (p.lose.includes(rank)) {
    // This process's memory is lost with it: a fresh process takes the rank.
    const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url)], { env: { ...process.env, ROLE: 'replacement' }, stdio: 'inherit' });
    const code = await new Promise<number>((resolve) => child.on('close', (c) => resolve(c ?? 1)));
    process.exit(code);
  }
}

const comm = await init({ masterPort: p.port2 });
const second = await train(comm, {
  ...base(p.steps), ckpt: { dir: p.dir, at: [] },
  inMemory: {
    store, every: p.every, restore: true,
    async onRestore(r, dp) {
      const sd = dp.stateDict() as CheckpointState & { optimizerStep: number };
      const restored = hashState(sd.tensors, sd.optimizerStep);
      // The same state from the durable checkpoint, when one was saved at that step: time and content.
      // Then, warm, the replacement loses its memory again and restores from the peer once more.
      let disk: { ms: number; hash: string; peerWarmMs: number; diskWarmMs: number } | null = null;
      if (r.source !== 'disk' && p.durableAt.includes(r.step)) {
        const fromDisk = async () => {
          const t0 = performance.now();
          await loadTraining(join(p.dir, stepDirName(r.step)), dp);
          return performance.now() - t0;
        };
        const ms = await fromDisk();
        const again = dp.stateDict() as CheckpointState & { optimizerStep: number };
        const hash = hashState(again.tensors, again.optimizerStep);
        if (replacement) store.clear();
        const warm = await store.restore(comm, dp);
        if (warm.source !== r.source || warm.step !== r.step) throw new Error(`warm restore: ${warm.source} step ${warm.step}`);
        disk = { ms, hash, peerWarmMs: warm.seconds * 1000, diskWarmMs: await fromDisk() };
      }
      report({ phase: 'restore', rank: comm.rank, replacement, step: r.step, source: r.source, sources: r.sources, rejected: r.rejected, ms: r.seconds * 1000, restored, disk, held: store.held() });
    },
  },
});
report({ phase: 'second', rank: comm.rank, start: second.start, losses: second.losses, held: store.held(), files: store.directory ? readdirSync(store.directory).sort() : null });
await comm.destroy();
