/**
 * One member's shard of an HSDP run as a held, self-checking byte frame
 * (src/checkpoint/in-memory-frame.ts): FSDP's state dict for its shard index (master
 * parameters and optimizer moments, cut at parameter borders) plus the train state
 * (step, loader position, RNG) and the optimizer's step count.
 *
 * A member snapshots its shard whenever its generation ends: a member parked while its
 * replica has a hole keeps that frame, and the next generation's FSDP wrapper loads
 * from it (the wrapper is bound to the old communicators). After a re-formation the
 * frames a member behind needs are sent over the generation's world communicator,
 * one point-to-point transfer per receiver, in an order every member computes the same
 * (hsdp-layout.ts planShardSync), so the pairs never wait on each other in a cycle.
 */
import type { Communicator } from '../comm/communicator.js';
import { fillFrame, fillTargets, planFrame, readFrame, type FrameMeta } from '../checkpoint/in-memory-frame.js';
import type { TrainState } from '../checkpoint/state.js';
import { NcclNodeError } from '../errors.js';
import type { FullyShardedDataParallel } from '../runtime/fsdp.js';
import type { ShardSyncPlan } from './hsdp-layout.js';

export interface HeldShard {
  frame: Uint8Array;
  /** owner: the shard index; world: the shard group's size; train: the train state and optimizerStep. */
  meta: FrameMeta;
}

/** This member's shard and train state, copied out of the FSDP wrapper (call between steps). */
export async function snapshotShard(fsdp: FullyShardedDataParallel, train: TrainState, shardIndex: number, shard: number): Promise<HeldShard> {
  const sd = fsdp.stateDict();
  const state = { tensors: sd.tensors, train: { ...train, optimizerStep: sd.optimizerStep } };
  const plan = planFrame(state, shardIndex, shard);
  return { frame: await fillFrame(plan, state), meta: plan.meta };
}

/** Fills a fresh FSDP wrapper (same shard index and shard group size) from a held frame; returns its train state. */
export async function loadShard(fsdp: FullyShardedDataParallel, held: HeldShard): Promise<TrainState> {
  if (held.meta.owner !== fsdp.comm.rank || held.meta.world !== fsdp.comm.size) {
    throw new NcclNodeError('ERR_SIZE_MISMATCH', `elastic HSDP: a frame of shard ${held.meta.owner} of ${held.meta.world} cannot load into shard ${fsdp.comm.rank} of ${fsdp.comm.size}`);
  }
  const { optimizerStep, ...train } = held.meta.train;
  await fsdp.loadStateDict(async (targets) => {
    await fillTargets(targets, [held]);
    return { optimizerStep: optimizerStep as number };
  });
  return train as TrainState;
}

export interface ShardSyncResult {
  held: HeldShard | null;
  /** Frame bytes this member sent or received. */
  bytes: number;
  ms: number;
}

/** Runs this member's part of `plan` over `world` (rank `world.rank`): sends its frame, or replaces its own with the received one. */
export async function runShardSync(world: Communicator, plan: ShardSyncPlan, held: HeldShard | null): Promise<ShardSyncResult> {
  const t0 = performance.now();
  const me = world.rank;
  let bytes = 0;
  for (const s of plan.sends) {
    if (s.source === me) {
      if (!held || held.meta.owner !== s.shardIndex || held.meta.step !== plan.target) {
        throw new NcclNodeError('ERR_UNAVAILABLE', `elastic HSDP: rank ${me} was to send shard ${s.shardIndex} at step ${plan.target} but holds ${held ? `shard ${held.meta.owner} at step ${held.meta.step}` : 'none'}`);
      }
      await world.send(new Float64Array([held.frame.length]), s.receiver);
      await world.send(held.frame, s.receiver);
      bytes += held.frame.length;
    } else if (s.receiver === me) {
      const len = new Float64Array(1);
      await world.recv(len, s.source);
      const frame = new Uint8Array(len[0]!);
      await world.recv(frame, s.source);
      const meta = readFrame(frame, `shard ${s.shardIndex} from rank ${s.source}`);
      if (meta.owner !== s.shardIndex || meta.step !== plan.target) {
        throw new NcclNodeError('ERR_SIZE_MISMATCH', `elastic HSDP: rank ${s.source} sent shard ${meta.owner} at step ${meta.step}, expected shard ${s.shardIndex} at step ${plan.target}`);
      }
      held = { frame, meta };
      bytes += frame.length;
    }
  }
  return { held, bytes, ms: performance.now() - t0 };
}
