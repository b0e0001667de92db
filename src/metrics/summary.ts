/**
 * The run summary: each rank reduces its step samples, rank 0 gathers them
 * (allGatherObject) and writes <logDir>/summary.json and a short table.
 * The first step (JIT warm-up, first allocations) is left out of the rates.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CollectiveTotals } from './collectives.js';
import type { CheckpointSample, StepSample, TrainMetrics } from './collector.js';
import { PHASES, type Phase } from './types.js';
import { formatVerdict, type RankStraggler, type StragglerVerdict } from './stragglers.js';

export interface RankSummary {
  rank: number;
  steps: number;
  /** Steps the rates below cover (all but the first when there are two or more). */
  measuredSteps: number;
  finalLoss: number | null;
  meanStepSeconds: number;
  medianStepSeconds: number;
  /** Share of the measured steps' time per phase (sums to 1). */
  phaseShare: Record<Phase, number>;
  phaseSeconds: Record<Phase, number>;
  tokensPerSecond: number;
  mfu: number | null;
  peakFlops: number | null;
  peakSource: string | null;
  flopsPerToken: number;
  maxRssBytes: number;
  maxDeviceMemoryBytes: number | null;
  collectives: Record<string, CollectiveTotals & { bandwidth: number }>;
  checkpoints: CheckpointSample[];
  /** This rank's straggler scores, when a StragglerMonitor ran. */
  straggler: RankStraggler | null;
}

export interface RunSummary {
  worldSize: number;
  /** Tokens per second over all ranks (sum of the ranks' rates). */
  tokensPerSecond: number;
  /** Mean of the ranks' MFU. */
  mfu: number | null;
  ranks: RankSummary[];
  /** The straggler verdict after the last step, when a StragglerMonitor ran. */
  stragglers: StragglerVerdict | null;
}

export function rankSummary(m: TrainMetrics): RankSummary {
  const all = m.samples;
  const s: StepSample[] = all.length > 1 ? all.slice(1) : all;
  const total = s.reduce((a, x) => a + x.seconds, 0);
  const tokens = s.reduce((a, x) => a + x.tokens, 0);
  const phaseSeconds = Object.fromEntries(PHASES.map((p) => [p, s.reduce((a, x) => a + x.phases[p], 0)])) as Record<Phase, number>;
  const sorted = s.map((x) => x.seconds).sort((a, b) => a - b);
  const peak = m.options.peak;
  const dev = all.map((x) => x.deviceMemoryBytes).filter((x): x is number => x !== null);
  return {
    rank: m.options.rank,
    steps: all.length,
    measuredSteps: s.length,
    finalLoss: all.at(-1)?.loss ?? null,
    meanStepSeconds: s.length ? total / s.length : NaN,
    medianStepSeconds: sorted.length ? (sorted[(sorted.length - 1) >> 1]! + sorted[sorted.length >> 1]!) / 2 : NaN,
    phaseShare: Object.fromEntries(PHASES.map((p) => [p, total > 0 ? phaseSeconds[p] / total : 0])) as Record<Phase, number>,
    phaseSeconds,
    tokensPerSecond: total > 0 ? tokens / total : NaN,
    mfu: peak && total > 0 ? (tokens * m.flopsPerToken) / total / peak.flops : null,
    peakFlops: peak?.flops ?? null,
    peakSource: peak ? `${peak.source} (${peak.device}, ${peak.precision})` : null,
    flopsPerToken: m.flopsPerToken,
    maxRssBytes: Math.max(0, ...all.map((x) => x.rssBytes)),
    maxDeviceMemoryBytes: dev.length ? Math.max(...dev) : null,
    collectives: Object.fromEntries(Object.entries(m.collectives).map(([k, t]) => [k, { ...t, bandwidth: t.seconds > 0 ? t.bytes / t.seconds : 0 }])),
    checkpoints: [...m.checkpoints],
    straggler: m.options.stragglers?.verdict.ranks[m.options.rank] ?? null,
  };
}

export function runSummary(ranks: RankSummary[], stragglers: StragglerVerdict | null = null): RunSummary {
  const mfus = ranks.map((r) => r.mfu).filter((x): x is number => x !== null);
  return {
    worldSize: ranks.length,
    tokensPerSecond: ranks.reduce((a, r) => a + r.tokensPerSecond, 0),
    mfu: mfus.length === ranks.length && mfus.length ? mfus.reduce((a, b) => a + b, 0) / mfus.length : null,
    ranks,
    stragglers,
  };
}

// Two significant digits below 0.1% (MFU of a small model on a GPU), one decimal otherwise.
const pct = (x: number) => `${x !== 0 && Math.abs(x) < 0.001 ? (100 * x).toPrecision(2) : (100 * x).toFixed(1)}%`;
const mib = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;

/** A short fixed-width table: one row per rank, then the run's totals. */
export function formatSummary(r: RunSummary): string {
  const head = ['rank', 'steps', 'step ms', 'compute', 'comm', 'data', 'ckpt', 'tok/s', 'MFU', 'RSS'];
  const rows = r.ranks.map((k) => [
    String(k.rank), String(k.steps), (k.medianStepSeconds * 1000).toFixed(1), pct(k.phaseShare.compute), pct(k.phaseShare.comm),
    pct(k.phaseShare.data), pct(k.phaseShare.checkpoint), k.tokensPerSecond.toFixed(0), k.mfu === null ? '-' : pct(k.mfu), mib(k.maxRssBytes),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padStart(widths[i]!)).join('  ');
  const ck = r.ranks[0]?.checkpoints ?? [];
  const tail = [`${r.worldSize} ranks: ${r.tokensPerSecond.toFixed(0)} tokens/s, MFU ${r.mfu === null ? '-' : pct(r.mfu)} of ${r.ranks[0]?.peakSource ?? 'no known peak'}`];
  if (r.stragglers) tail.push(formatVerdict(r.stragglers));
  if (ck.length) tail.push(`checkpoints: ${ck.length}, last ${mib(ck.at(-1)!.bytes)}, commit ${ck.at(-1)!.commitSeconds.toFixed(2)} s`);
  return [line(head), ...rows.map(line), ...tail].join('\n');
}

/**
 * Collective: every rank's summary reaches rank 0, which writes summary.json under
 * logDir (when set) and returns the summary; other ranks return null.
 */
export async function summarize(m: TrainMetrics, comm: { rank: number; size: number; allGatherObject<T>(v: T): Promise<T[]> }, logDir?: string): Promise<RunSummary | null> {
  await m.options.stragglers?.settle(); // the last steps' straggler scores
  const mine = rankSummary(m);
  const all = comm.size > 1 ? await comm.allGatherObject(mine) : [mine];
  if (comm.rank !== 0) return null;
  const run = runSummary(all, m.options.stragglers?.verdict ?? null);
  if (logDir) writeFileSync(join(logDir, 'summary.json'), `${JSON.stringify(run, null, 2)}\n`);
  m.logger?.info({ event: 'summary', step: all[0]!.steps, tokens_per_second: run.tokensPerSecond, mfu: run.mfu }, 'summary');
  return run;
}
