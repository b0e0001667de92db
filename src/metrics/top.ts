/**
 * `nccl-node top`: a live view of a running job from its ranks' Prometheus
 * endpoints (TrainMetrics' `--metrics-port`, one per rank at port + LOCAL_RANK).
 * Each refresh scrapes every endpoint, reads the few families an operator watches
 * (step, loss, step time and where it went, throughput, MFU, memory, straggler
 * verdict, loss-health and SDC events) and draws one row per rank plus the job's
 * totals. A rank whose endpoint does not answer is shown as down: a stalled or dead
 * rank is the first thing to see.
 */
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import Table from 'cli-table3';

export interface RankView {
  target: string;
  up: boolean;
  /** Why the scrape failed (down only). */
  error?: string;
  rank?: number;
  step?: number;
  loss?: number;
  stepSeconds?: number;
  /** Share of the last step spent in exposed communication. */
  commShare?: number;
  tokensPerSecond?: number;
  mfu?: number;
  residentBytes?: number;
  stragglerScore?: number;
  /** chronic, intermittent, one-off, victim or ok (the state gauge at 1). */
  stragglerState?: string;
  lossHealthEvents?: number;
  sdcMismatches?: number;
}

export interface JobView {
  at: string;
  ranks: RankView[];
  up: number;
  /** Sum over the ranks that answered. */
  tokensPerSecond: number;
  slowestRank?: number;
  stepSecondsMedian?: number;
}

type Families = ReturnType<typeof parsePrometheusTextFormat>;

function value(f: Families, name: string, labels: Record<string, string> = {}): number | undefined {
  const fam = f.find((x) => x.name === name);
  const s = fam?.metrics.find((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v));
  return s?.value === undefined ? undefined : Number(s.value);
}

function total(f: Families, name: string): number | undefined {
  const fam = f.find((x) => x.name === name);
  return fam ? fam.metrics.reduce((a, m) => a + Number(m.value ?? 0), 0) : undefined;
}

/** The view of one rank from its endpoint's text. */
export function rankView(target: string, text: string): RankView {
  const f = parsePrometheusTextFormat(text);
  const rankLabel = f.flatMap((x) => x.metrics).find((m) => m.labels?.rank !== undefined)?.labels?.rank;
  const stepSeconds = value(f, 'nccl_node_step_seconds');
  const comm = value(f, 'nccl_node_step_phase_seconds', { phase: 'comm' });
  const state = f.find((x) => x.name === 'nccl_node_straggler_state')?.metrics.find((m) => Number(m.value) === 1)?.labels?.state;
  const v: RankView = {
    target, up: true,
    ...(rankLabel !== undefined ? { rank: Number(rankLabel) } : {}),
    step: value(f, 'nccl_node_step'),
    loss: value(f, 'nccl_node_loss'),
    stepSeconds,
    commShare: comm !== undefined && stepSeconds ? comm / stepSeconds : undefined,
    tokensPerSecond: value(f, 'nccl_node_tokens_per_second'),
    mfu: value(f, 'nccl_node_mfu_ratio'),
    residentBytes: value(f, 'nccl_node_resident_memory_bytes'),
    stragglerScore: value(f, 'nccl_node_straggler_score'),
    stragglerState: state,
    lossHealthEvents: total(f, 'nccl_node_loss_health_events_total'),
    sdcMismatches: total(f, 'nccl_node_sdc_mismatches_total'),
  };
  return Object.fromEntries(Object.entries(v).filter(([, x]) => x !== undefined)) as unknown as RankView;
}

/** Scrapes every target (http://host:port/metrics) at once; a failure or timeout marks that rank down. */
export async function scrapeJob(targets: readonly string[], timeoutMs = 2_000): Promise<JobView> {
  const ranks = await Promise.all(targets.map(async (target): Promise<RankView> => {
    try {
      const res = await fetch(target, { signal: AbortSignal.timeout(timeoutMs) });
      if (!res.ok) return { target, up: false, error: `HTTP ${res.status}` };
      return rankView(target, await res.text());
    } catch (err) {
      const e = err as Error & { cause?: { code?: string; message?: string } };
      return { target, up: false, error: e.name === 'TimeoutError' ? `no answer in ${timeoutMs} ms` : (e.cause?.code ?? e.cause?.message ?? e.message) };
    }
  }));
  ranks.sort((a, b) => (a.rank ?? Infinity) - (b.rank ?? Infinity));
  const live = ranks.filter((r) => r.up);
  const times = live.map((r) => r.stepSeconds).filter((x): x is number => x !== undefined).sort((a, b) => a - b);
  const slowest = live.reduce<RankView | undefined>((a, r) => ((r.stepSeconds ?? -1) > (a?.stepSeconds ?? -1) ? r : a), undefined);
  return {
    at: new Date().toISOString(),
    ranks,
    up: live.length,
    tokensPerSecond: live.reduce((a, r) => a + (r.tokensPerSecond ?? 0), 0),
    ...(slowest?.rank !== undefined ? { slowestRank: slowest.rank } : {}),
    ...(times.length ? { stepSecondsMedian: times[Math.floor(times.length / 2)]! } : {}),
  };
}

/** Targets for ranks serving on port + LOCAL_RANK on each host. */
export function targetsFor(hosts: readonly string[], port: number, perHost: number): string[] {
  return hosts.flatMap((h) => Array.from({ length: perHost }, (_, i) => `http://${h}:${port + i}/metrics`));
}

const fmt = (x: number | undefined, digits: number, scale = 1, unit = '') => (x === undefined || Number.isNaN(x) ? '-' : `${(x * scale).toFixed(digits)}${unit}`);

/** One frame of the live view. */
export function renderTop(job: JobView): string {
  const table = new Table({
    head: ['rank', 'step', 'loss', 'step ms', 'comm %', 'tokens/s', 'MFU %', 'RSS MiB', 'straggler', 'health'],
    style: { head: [], border: [] },
  });
  for (const r of job.ranks) {
    if (!r.up) {
      table.push([r.rank ?? '?', { colSpan: 9, content: `DOWN ${r.target}: ${r.error}` }]);
      continue;
    }
    const straggler = r.stragglerState === undefined ? '-' : `${r.stragglerState} ${fmt(r.stragglerScore, 2)}`;
    const health = [r.lossHealthEvents ? `loss events ${r.lossHealthEvents}` : '', r.sdcMismatches ? `SDC ${r.sdcMismatches}` : ''].filter(Boolean).join(', ') || 'ok';
    table.push([r.rank ?? '?', r.step ?? '-', fmt(r.loss, 4), fmt(r.stepSeconds, 1, 1e3), fmt(r.commShare, 1, 100), fmt(r.tokensPerSecond, 0),
      fmt(r.mfu, 2, 100), fmt(r.residentBytes, 0, 1 / 2 ** 20), straggler, health]);
  }
  const slow = job.slowestRank !== undefined ? `, slowest rank ${job.slowestRank}` : '';
  return `${job.at}  ranks up ${job.up}/${job.ranks.length}, ${job.tokensPerSecond.toFixed(0)} tokens/s, median step ${fmt(job.stepSecondsMedian, 1, 1e3, ' ms')}${slow}\n${table.toString()}\n`;
}
