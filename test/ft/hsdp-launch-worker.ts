/**
 * One rank of an elastic HSDP run under `nccl-node run --restart-scope rank`
 * (trainElasticHsdp on the payload's config). ElasticGroup.start() founds the group,
 * or joins it when the launcher says this process is a restarted rank. On its first
 * life founding rank `faultRank` SIGKILLs itself before step `faultAt`. While a replica
 * is out, group rank 0 waits after step `growAt - 1` for the restarted rank to
 * register, so the replica comes back at that step boundary at the latest.
 *
 * Files in FT_OUT: start-<RANK>-<pid>.json at start (restart count, told to rejoin),
 * steps-<RANK>-<pid>.jsonl, one line per committed step (kept when the process dies),
 * end-<RANK>-<pid>.json at the end: decisions, slot and the full parameters (base64).
 */
import { appendFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { pino } from 'pino';
import { exitCodeOf } from '../../src/ft/elastic-train.js';
import { ElasticGroup } from '../../src/ft/group.js';
import { trainElasticHsdp, type ElasticHsdpConfig } from '../../src/ft/hsdp-train.js';
import { concat } from '../runtime/helpers.js';
import { waitForJoiner } from './worker-util.js';

interface Payload {
  cfg: Omit<ElasticHsdpConfig, 'beforeStep' | 'afterStep'>;
  windowMs: number;
  timeoutMs: number;
  faultRank: number;
  faultAt: number;
  growAt: number;
}

const p = JSON.parse(process.env.FT_PAYLOAD!) as Payload;
const out = process.env.FT_OUT!;
const rank = Number(process.env.RANK);
const restarts = Number(process.env.NCCL_NODE_RANK_RESTART_COUNT ?? '0');
const founding = Number(process.env.WORLD_SIZE);
const file = (kind: string): string => path.join(out, `${kind}-${rank}-${process.pid}.json`);
writeFileSync(file('start'), JSON.stringify({ rank, pid: process.pid, restarts, rejoin: process.env.NCCL_NODE_FT_REJOIN === '1' }));

const group = await ElasticGroup.start({ windowMs: p.windowMs, timeoutMs: p.timeoutMs, admitTimeoutMs: 40_000 });
try {
  const r = await trainElasticHsdp(group, {
    ...p.cfg,
    ladder: { logger: pino({ base: { rank } }, pino.destination(2)) },
    beforeStep: ({ step }) => {
      if (restarts === 0 && rank === p.faultRank && step === p.faultAt) process.kill(process.pid, 'SIGKILL');
    },
    afterStep: async ({ record, rank: groupRank }) => {
      const rep = { step: record.step, ids: record.sampleIds, dpRank: record.dpRank, dpSize: record.dpSize, slot: record.slot };
      appendFileSync(path.join(out, `steps-${rank}-${process.pid}.jsonl`), `${JSON.stringify(rep)}\n`);
      if (groupRank !== 0 || record.dpSize >= founding || record.step !== p.growAt - 1) return;
      await waitForJoiner(group, 'the restarted rank');
    },
  });
  const flat = concat(r.params);
  writeFileSync(file('end'), JSON.stringify({
    rank, pid: process.pid, restarts, slot: r.layout.slots[group.comm.rank],
    decisions: r.decisions.map((d) => ({ action: d.action, ms: d.ms, size: d.size, step: d.step, transferBytes: d.transferBytes })),
    params: Buffer.from(flat.buffer, flat.byteOffset, flat.byteLength).toString('base64'),
  }));
  await group.close();
} catch (err) {
  process.stderr.write(`${(err as Error).stack}\n`);
  process.exit(exitCodeOf(err));
}
