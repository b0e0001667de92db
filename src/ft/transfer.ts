/**
 * Live state transfer after a re-formation: the member with the most committed steps
 * sends the whole training state (parameters, optimizer moments and step count, the
 * train state: step, data loader position, RNG) to every member that is behind it
 * (a joiner has none), over the new communicator; no disk. The bytes are one
 * in-memory checkpoint frame (src/checkpoint/in-memory-frame.ts): the same layout and
 * CRC32C as the peer replicas, so a damaged transfer fails with ERR_CHECKSUM instead
 * of training on it.
 *
 * Members that already hold the source's step keep their state: replicas agree, so a
 * shrink moves no tensor bytes.
 */
import type { Communicator } from '../comm/communicator.js';
import { fillFrame, fillTargets, planFrame, readFrame } from '../checkpoint/in-memory-frame.js';
import type { TrainState } from '../checkpoint/state.js';
import { NcclNodeError } from '../errors.js';
import type { Optimizer } from '../runtime/optim.js';
import { wholeTensors } from '../runtime/state-dict.js';
import type { ParamLike } from '../runtime/types.js';
import type { Member } from './membership.js';

export interface LiveState {
  params: ParamLike[];
  optimizer: Optimizer;
  /** step, data (DataLoader.state()), rng, ... : any JSON. */
  train: TrainState;
}

export interface SyncPlan {
  /** New rank of the member that sends. */
  source: number;
  /** New ranks that receive. */
  receivers: number[];
  step: number;
}

/** The most advanced member sends (the lowest rank among ties) to every member behind it. */
export function planSync(members: readonly Member[]): SyncPlan {
  let src = members[0]!;
  for (const m of members) if (m.step > src.step) src = m;
  if (src.step < 0) throw new NcclNodeError('ERR_UNAVAILABLE', 'state transfer: no member holds training state (every member is a joiner)');
  return { source: src.rank, receivers: members.filter((m) => m.step !== src.step).map((m) => m.rank), step: src.step };
}

export interface SyncResult {
  /** The train state every member now holds. */
  train: TrainState;
  /** Frame bytes this rank sent or received (0: it kept its own state). */
  bytes: number;
  ms: number;
}

export async function syncState(comm: Communicator, plan: SyncPlan, live: LiveState): Promise<SyncResult> {
  const t0 = performance.now();
  const me = comm.rank;
  const targets = () => wholeTensors(live.params, (p) => p.data, live.optimizer);
  if (plan.receivers.length === 0 || (me !== plan.source && !plan.receivers.includes(me))) {
    return { train: live.train, bytes: 0, ms: performance.now() - t0 };
  }
  if (me === plan.source) {
    const state = { tensors: targets(), train: { ...live.train, optimizerStep: live.optimizer.state([]).step } };
    const frame = await fillFrame(planFrame(state, me, comm.size), state);
    const len = new Float64Array([frame.length]);
    // One sender, each receiver in turn: the length, then the frame.
    for (const r of plan.receivers) {
      await comm.send(len, r);
      await comm.send(frame, r);
    }
    return { train: live.train, bytes: frame.length * plan.receivers.length, ms: performance.now() - t0 };
  }
  const len = new Float64Array(1);
  await comm.recv(len, plan.source);
  const frame = new Uint8Array(len[0]!);
  await comm.recv(frame, plan.source);
  const meta = readFrame(frame, `state transfer from rank ${plan.source}`);
  await fillTargets(targets(), [{ meta, frame }]);
  const { optimizerStep, ...train } = meta.train;
  live.optimizer.loadState({ step: optimizerStep as number });
  return { train: train as TrainState, bytes: frame.length, ms: performance.now() - t0 };
}
