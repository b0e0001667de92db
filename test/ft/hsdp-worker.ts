/**
 * One process of an elastic HSDP run (src/ft/hsdp-train.ts): a founding member, or with
 * FT_ROLE=joiner a restarted rank that waits for the test's signal and joins the group
 * live, or with FT_ROLE=spare a spare that registers at start and takes a lost member's
 * place in the round that finds it gone. The member whose founding rank is `dieRank` SIGKILLs itself before step `dieAt`;
 * founding rank 0 signals the joiner once `joinAt` steps are committed and waits until it
 * registered, so the replica re-forms exactly at that step boundary. Every process that
 * finishes reports its steps (data-parallel rank and size, slot, sample ids), and writes
 * the ladder's decisions, its final layout and its full gathered parameters.
 */
import { pino } from 'pino';
import { ElasticGroup } from '../../src/ft/group.js';
import { exitCodeOf } from '../../src/ft/elastic-train.js';
import { trainElasticHsdp, type ElasticHsdpConfig } from '../../src/ft/hsdp-train.js';
import { StoreClient } from '../../src/rendezvous/client.js';
import { readPayload, report, writeResult } from '../helpers/ranks.js';
import { concat } from '../runtime/helpers.js';
import { waitForJoiner } from './worker-util.js';

export interface HsdpPayload {
  cfg: Omit<ElasticHsdpConfig, 'beforeStep' | 'afterStep'>;
  windowMs: number;
  timeoutMs: number;
  dieRank?: number;
  dieAt?: number;
  joinAt?: number;
}

const p = readPayload<HsdpPayload>();
const spare = process.env.FT_ROLE === 'spare';
const joiner = process.env.FT_ROLE === 'joiner' || spare;
const founding = Number(process.env.RANK);
const opts = { windowMs: p.windowMs, timeoutMs: p.timeoutMs };
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
const logger = pino({ base: { founding } }, pino.destination(2));
try {
  const r = await trainElasticHsdp(group, {
    ...p.cfg,
    ladder: { ...p.cfg.ladder, logger },
    beforeStep: ({ step }) => {
      if (!joiner && founding === p.dieRank && step === p.dieAt) process.kill(process.pid, 'SIGKILL');
    },
    afterStep: async ({ record }) => {
      report({ step: record.step, ids: record.sampleIds, gen: record.generation, dpRank: record.dpRank, dpSize: record.dpSize, slot: record.slot });
      if (!joiner && founding === 0 && p.joinAt !== undefined && record.step === p.joinAt - 1) {
        await group.store.set('test/join-now', '1');
        await waitForJoiner(group, 'the restarted rank');
      }
    },
  });
  writeResult({ decisions: r.decisions, losses: r.losses, generation: group.generation, layout: r.layout, slot: r.layout.slots[group.comm.rank] }, r.params.length ? concat(r.params) : undefined);
  await group.close();
} catch (err) {
  process.stderr.write(`${(err as Error).stack}\n`);
  process.exit(exitCodeOf(err));
}
