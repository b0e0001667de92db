/**
 * One process of an elastic run (src/ft): a founding member, or with FT_ROLE=joiner a
 * process that waits for the test's signal, then joins the group live, or with
 * FT_ROLE=spare one that waits to replace a lost member. A member whose
 * founding rank is `dieRank` kills itself (SIGKILL) before step `dieAt`; founding rank
 * 0 signals the joiner once `joinAt` steps are committed and waits until it registered,
 * so the group grows exactly at that step boundary. Every process that finishes writes
 * its committed steps, the ladder's decisions and its final parameters.
 */
import { ElasticGroup } from '../../src/ft/group.js';
import { exitCodeOf, trainElastic, type ElasticTrainConfig } from '../../src/ft/elastic-train.js';
import { StoreClient } from '../../src/rendezvous/client.js';
import { readPayload, report, writeResult } from '../helpers/ranks.js';
import { pino } from 'pino';
import { NcclNodeError } from '../../src/errors.js';
import { waitForJoiner } from './worker-util.js';
import { concat } from '../runtime/helpers.js';

export interface FtPayload {
  cfg: Omit<ElasticTrainConfig, 'beforeStep' | 'afterStep'>;
  windowMs: number;
  timeoutMs: number;
  dieRank?: number;
  dieAt?: number;
  joinAt?: number;
  /** This founding rank throws one ERR_TIMEOUT before step timeoutAt (a transient fault). */
  timeoutRank?: number;
  timeoutAt?: number;
  /**
   * A wrong "gone" report: founding rank `reporter` fails step `at` with an ERR_PEER_LOST
   * naming founding rank `victim`, which is alive but sleeps `slowMs` before that step.
   */
  falseLost?: { reporter: number; victim: number; at: number; slowMs: number };
}

const p = readPayload<FtPayload>();
const spare = process.env.FT_ROLE === 'spare';
const joiner = process.env.FT_ROLE === 'joiner' || spare;
const founding = Number(process.env.RANK);
const opts = { windowMs: p.windowMs, timeoutMs: p.timeoutMs };
const t0 = performance.now();
let timedOut = false;
let reported = false;
let slept = false;
let group: ElasticGroup;
if (spare) {
  group = await ElasticGroup.join({ ...opts, spare: true, admitTimeoutMs: 40_000 });
} else if (joiner) {
  const store = await StoreClient.connect({ host: '127.0.0.1', port: Number(process.env.MASTER_PORT), token: process.env.NCCL_NODE_TOKEN!, connectTimeoutMs: 30_000 });
  await store.get('test/join-now', { timeoutMs: 60_000 });
  await store.close();
  group = await ElasticGroup.join({ ...opts, admitTimeoutMs: 30_000 });
} else {
  group = await ElasticGroup.start(opts);
}
report({ formed: group.generation, rank: group.comm.rank, size: group.comm.size, ms: performance.now() - t0 });
const logger = pino({ base: { founding } }, pino.destination(2));
try {
  const r = await trainElastic(group, {
    ...p.cfg,
    ladder: { ...p.cfg.ladder, logger },
    beforeStep: async ({ step }) => {
      if (!joiner && founding === p.dieRank && step === p.dieAt) process.kill(process.pid, 'SIGKILL');
      const f = p.falseLost;
      if (!joiner && f && step === f.at && founding === f.reporter && !reported) {
        reported = true;
        throw new NcclNodeError('ERR_PEER_LOST', `injected: founding rank ${f.victim} reported lost`, { failedRank: f.victim });
      }
      if (!joiner && f && step === f.at && founding === f.victim && !slept) {
        slept = true;
        await new Promise((res) => setTimeout(res, f.slowMs));
      }
      if (!joiner && founding === p.timeoutRank && step === p.timeoutAt && !timedOut) {
        timedOut = true;
        throw new NcclNodeError('ERR_TIMEOUT', `injected: step ${step} timed out`);
      }
    },
    afterStep: async ({ record, rank }) => {
      report({ step: record.step, ids: record.sampleIds, gen: record.generation, size: record.size, rank });
      if (!joiner && founding === 0 && p.joinAt !== undefined && record.step === p.joinAt - 1) {
        await group.store.set('test/join-now', '1');
        await waitForJoiner(group, 'the joiner');
      }
    },
  });
  const flat = concat(r.params);
  writeResult({ decisions: r.decisions, losses: r.losses, generation: group.generation, rank: group.comm.rank, size: group.comm.size, metrics: await r.ladder.registry.metrics() }, flat);
  await group.close();
} catch (err) {
  process.stderr.write(`${(err as Error).stack}\n`);
  process.exit(exitCodeOf(err));
}
