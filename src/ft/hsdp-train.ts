/**
 * Elastic hybrid-sharded training (TinyLM, FSDP ZeRO-3 inside shard groups of S ranks,
 * gradients all-reduced across R replicas, Gloo): a lost rank takes its replica out,
 * the other replicas go on, and the replica comes back once a restarted rank or a
 * spare fills the hole, without restarting any process.
 *
 * One ElasticGroup holds every live process (membership rounds, the ladder, joiners
 * and spares as for trainElastic). After each formation, world rank 0 lays the members
 * out in R x S slots (hsdp-layout.ts); complete replicas train, the others are parked.
 * The shard and replicate communicators are split from the generation's communicator,
 * so a fault's abort of it takes them down too. A parked member keeps its shard frame
 * (hsdp-transfer.ts) and joins each step's world reduction (loss, joiners waiting), so
 * it follows the step count and sees the joiners when the active members do.
 *
 * The global batch is constant: at R' active replicas the data-parallel rank is
 * replica' x S + shard index, of R' x S, each taking globalBatch / (R' x S) rows of
 * the DataLoader's global order, with noise keyed by the sample's global position
 * (sampleRng). A run is therefore a chain of plain HSDP runs at the mesh shapes it
 * went through. It is not bit-identical to a run at another R: the reduction adds the
 * same gradients in another grouping (a mean within the shard group, then across
 * replicas) and every rank sums its rows' gradients over a different row count.
 */
import type { TrainState } from '../checkpoint/state.js';
import type { Communicator } from '../comm/communicator.js';
import { DataLoader, TokenDataset, type LoaderState } from '../data/index.js';
import { NcclNodeError } from '../errors.js';
import { TinyLM } from '../models/tiny-lm/tiny-lm.js';
import { createOptimizer, FullyShardedDataParallel } from '../runtime/index.js';
import { modelRows, type ElasticTrainConfig, type StepRecord } from './elastic-train.js';
import type { ElasticGroup } from './group.js';
import { assignSlots, placeOf, planShardSync, type HsdpLayout } from './hsdp-layout.js';
import { loadShard, runShardSync, snapshotShard, type HeldShard } from './hsdp-transfer.js';
import { EXIT_FULL_RESTART, faultOf, RecoveryLadder, type Decision } from './ladder.js';

export interface HsdpStepContext {
  step: number;
  /** Rank and size in the generation's world communicator (parked members included). */
  rank: number;
  size: number;
  generation: number;
  group: ElasticGroup;
  /** This member trains this step; dpRank / dpSize: its place in the data order (-1 parked). */
  active: boolean;
  dpRank: number;
  dpSize: number;
  /** Slot replica x S + shard index (-1: a member beyond the R x S slots). */
  slot: number;
}

export interface HsdpStepRecord extends StepRecord {
  dpRank: number;
  dpSize: number;
  slot: number;
}

export interface ElasticHsdpConfig extends Omit<ElasticTrainConfig, 'beforeStep' | 'afterStep'> {
  /** Ranks per shard group (S); the founding world is R x S. */
  hsdp: { shard: number };
  beforeStep?: (s: HsdpStepContext) => Promise<void> | void;
  afterStep?: (s: HsdpStepContext & { record: HsdpStepRecord }) => Promise<void> | void;
}

export interface ElasticHsdpResult {
  /** Full, unpadded parameters (gathered in the shard group); empty on a member that ended parked. */
  params: Float32Array[];
  losses: number[];
  records: HsdpStepRecord[];
  decisions: RecoveryLadder['history'];
  ladder: RecoveryLadder;
  layout: HsdpLayout;
}

interface Wrapped {
  layout: HsdpLayout;
  place: ReturnType<typeof placeOf>;
  dpSize: number;
  comms: Communicator[];
  fsdp: FullyShardedDataParallel | null;
  loader: DataLoader | null;
}

export async function trainElasticHsdp(group: ElasticGroup, cfg: ElasticHsdpConfig): Promise<ElasticHsdpResult> {
  const S = cfg.hsdp.shard;
  if (!Number.isInteger(S) || S < 1) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `trainElasticHsdp: hsdp.shard must be a positive integer, received ${S}`);
  if (group.generation === 0 && group.comm.size % S !== 0) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `trainElasticHsdp: the founding world of ${group.comm.size} ranks is not a whole number of shard groups of ${S}`);
  }
  const model = new TinyLM(cfg.model);
  const optimizer = createOptimizer(cfg.optimizer);
  const ds = typeof cfg.dataset === 'string' ? await TokenDataset.open(cfg.dataset) : cfg.dataset;
  const ladder = new RecoveryLadder({ ...cfg.ladder, globalBatch: cfg.globalBatch });
  const G = cfg.globalBatch, T = cfg.model.seqLen, noise = cfg.noise ?? 0;
  const rng = { kind: 'per-sample', seed: cfg.dataSeed, noise };
  let train: TrainState = { step: 0, rng };
  let held: HeldShard | null = null;
  /** Slot by member id in the current generation (what the next layout keeps). */
  let slots = new Map<string, number>();
  /** The group's step, as a parked member follows it. */
  let liveStep = 0;
  const losses: number[] = [];
  const records: HsdpStepRecord[] = [];
  let last = { bytes: 0, ms: 0 };
  /** R: the founding world's shard groups (a joiner learns it from the first layout). */
  let replicas = group.comm.size / S;

  const loaderAt = async (p: Wrapped['place'], dpSize: number): Promise<DataLoader> => {
    const loader = await DataLoader.create(ds, { seqLen: T, globalBatch: G, rank: p.dpRank, worldSize: dpSize, seed: cfg.dataSeed });
    if (train.data) loader.load(train.data as LoaderState);
    else loader.skip(train.step);
    return loader;
  };

  /** Lays out the new generation, moves shards to the members behind, splits the communicators and wraps. */
  const wrap = async (previousDp: number): Promise<{ w: Wrapped; d: Decision }> => {
    const comm = group.comm;
    const proposed = comm.rank === 0 ? assignSlots(group.members, slots, { replicas, shard: S }) : null;
    const layout = await comm.broadcastObject(proposed, { root: 0 }) as HsdpLayout;
    replicas = layout.replicas;
    slots = new Map(group.members.map((m, i) => [m.id, layout.slots[i]!]));
    const place = placeOf(layout, comm.rank);
    const dpSize = layout.active.length * S;
    const d = ladder.onRound(previousDp, dpSize);
    if (d.action === 'full-restart') throw restart(d);
    last = { bytes: 0, ms: 0 };
    if (!(group.generation === 0 && held === null)) {
      const plan = planShardSync(group.members, layout);
      const sync = await runShardSync(comm, plan, held);
      held = sync.held;
      last = { bytes: sync.bytes, ms: sync.ms };
      liveStep = plan.target;
    }
    const on = place.replica >= 0;
    const shardComm = await comm.split({ color: on ? place.replica : -1, key: place.shardIndex });
    const repComm = await comm.split({ color: on ? place.shardIndex : -1, key: place.replica });
    const w: Wrapped = { layout, place, dpSize, comms: [comm], fsdp: null, loader: null };
    if (on) {
      w.comms.push(shardComm!, repComm!);
      const fsdp = (w.fsdp = await FullyShardedDataParallel.create(shardComm!, model.units, optimizer, { stage: 3, replicate: repComm, broadcastParams: false }));
      if (held) train = await loadShard(fsdp, held);
      held = null;
      w.loader = await loaderAt(place, dpSize);
    }
    return { w, d };
  };
  let current: Wrapped | undefined;

  const restart = (d: Decision) => new NcclNodeError('ERR_UNAVAILABLE', `elastic HSDP cannot continue in-process (${d.reason}): restart the gang from its checkpoint (exit ${EXIT_FULL_RESTART})`, { exitCode: EXIT_FULL_RESTART, action: d.action });

  /** Ends this member's part in the generation: its shard (if it trained) becomes a held frame. */
  const park = async (): Promise<void> => {
    const w = current!;
    if (!w.fsdp) return;
    held = await snapshotShard(w.fsdp, train, w.place.shardIndex, S);
    w.fsdp.dispose();
    w.fsdp = null;
  };

  const reform = async (t0: number, cause?: unknown): Promise<Wrapped> => {
    const previousDp = current!.dpSize;
    for (let attempt = 0; ; attempt++) {
      try {
        await park();
        const round = await group.reform(held?.meta.step ?? -1, cause);
        const { w, d } = await wrap(previousDp);
        ladder.record(d, performance.now() - t0, {
          generation: group.generation, size: w.dpSize, step: w.fsdp ? train.step : liveStep,
          roundMs: round.ms, transferMs: last.ms, transferBytes: last.bytes, via: group.formation.via, commMs: group.formation.ms,
        });
        return w;
      } catch (err) {
        if (err instanceof NcclNodeError && err.details.exitCode === EXIT_FULL_RESTART) {
          ladder.record({ action: 'full-restart', reason: err.message }, performance.now() - t0, { generation: group.generation, step: train.step });
          throw err;
        }
        if (attempt >= 2) throw restart({ action: 'full-restart', reason: `re-forming failed ${attempt + 1} times: ${(err as Error).message}` });
      }
    }
  };

  current = (await wrap(0)).w;
  let retries = 0;
  for (;;) {
    const w = current;
    const active = w.fsdp !== null;
    const step = active ? train.step : liveStep;
    if (step >= cfg.steps) break;
    const comm = group.comm;
    const ctx: HsdpStepContext = { step, rank: comm.rank, size: comm.size, generation: group.generation, group, active, dpRank: w.place.dpRank, dpSize: w.dpSize, slot: w.place.slot };
    let committed = false;
    try {
      await cfg.beforeStep?.(ctx);
      let share = 0;
      if (active) {
        const fsdp = w.fsdp!;
        const batch = await w.loader!.next();
        const per = G / w.dpSize;
        const rows = modelRows(batch, step * G + w.place.dpRank * per, cfg.model.vocab, T, cfg.dataSeed, noise);
        fsdp.zeroGrad();
        const loss = await model.forwardBackward(rows, per, { gradScale: 1 / (per * T), hooks: fsdp.hooks });
        await fsdp.finish();
        if (cfg.clipNorm) await fsdp.clipGradNorm(cfg.clipNorm);
        await fsdp.step();
        committed = true;
        train = { step: step + 1, data: w.loader!.state(), rng };
        const record: HsdpStepRecord = { step, generation: group.generation, rank: comm.rank, size: comm.size, sampleIds: batch.sampleIds, loss, dpRank: w.place.dpRank, dpSize: w.dpSize, slot: w.place.slot };
        records.push(record);
        await cfg.afterStep?.({ ...ctx, record });
        share = loss / w.dpSize;
      }
      // Every member, parked or not: the mean loss and (from rank 0) the joiners waiting.
      const red = new Float64Array([share, comm.rank === 0 ? await group.pendingJoiners() : 0]);
      await comm.allReduce(red, { op: 'sum' });
      losses[step] = red[0]!;
      if (!active) liveStep = step + 1;
      retries = 0;
      if (red[1]! > 0 && step + 1 < cfg.steps) current = await reform(performance.now());
    } catch (err) {
      const t0 = performance.now();
      if (committed) losses[step] = NaN;
      const d = ladder.onFault(faultOf(err, retries, w.comms.every((c) => c.state === 'ok')));
      if (d.action === 'raise') throw err;
      if (d.action === 'retry' && !committed) {
        retries++;
        if (active) w.loader = await loaderAt(w.place, w.dpSize);
        ladder.record({ action: 'retry', reason: d.reason }, performance.now() - t0, { generation: group.generation, step });
        continue;
      }
      retries = 0;
      current = await reform(t0, err);
    }
  }
  const params = current.fsdp ? await current.fsdp.gatherParams() : [];
  await ds.close();
  return { params, losses, records, decisions: ladder.history, ladder, layout: current.layout };
}
