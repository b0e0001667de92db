/**
 * Connectivity: is every rank healthy, and does the fabric carry an all-reduce
 * sweep with correct results, enough bus bandwidth and no TCP loss? Each rank
 * checks what `nccl-node doctor` checks that applies to its backend (on NCCL: the
 * CUDA/NCCL libraries, the device, NVML health; on both: the same Node and
 * backend versions as rank 0, free memory), the reports are gathered with
 * allGatherObject, then the sweep of `nccl-node bench` runs in-process.
 */
import { readFile } from 'node:fs/promises';
import { freemem, hostname } from 'node:os';
import type { Communicator } from '../comm/communicator.js';
import { allReduceSweep } from '../nccl-tests/index.js';
import { gpuInfo, health } from '../index.js';
import type { PocConfig } from './config.js';
import { gate } from './report.js';
import type { StageResult } from './stage.js';

export interface RankHealth {
  rank: number;
  host: string;
  pid: number;
  node: string;
  backend: string;
  backendVersion: string;
  freeMemoryBytes: number;
  devices?: number;
  problems: string[];
  /** Reported, not failing (as doctor: NVML health unavailable). */
  warnings: string[];
}

/** Free memory below this is a problem: a rank would swap or be killed while training. */
const MIN_FREE_BYTES = 256 * 2 ** 20;

async function rankHealth(comm: Communicator): Promise<RankHealth> {
  const problems: string[] = [];
  const h: RankHealth = {
    rank: comm.rank, host: hostname(), pid: process.pid, node: process.version, backend: comm.backend,
    backendVersion: comm.backendVersion, freeMemoryBytes: freemem(), problems, warnings: [],
  };
  if (h.freeMemoryBytes < MIN_FREE_BYTES) problems.push(`only ${Math.round(h.freeMemoryBytes / 2 ** 20)} MiB of memory free`);
  if (comm.backend === 'nccl') {
    const info = gpuInfo();
    h.devices = info.devices;
    if (!info.cuda) problems.push(`CUDA: ${info.cudaError}`);
    else if (info.devices === 0) problems.push('CUDA reports no devices');
    if (!info.nccl) problems.push(`NCCL: ${info.ncclError}`);
    try {
      const r = await health();
      for (const d of r.devices) for (const p of d.problems) problems.push(`GPU ${d.index}: ${p}`);
    } catch (err) {
      // As doctor: NVML health missing is a warning, not a failure.
      h.warnings.push(`NVML health unavailable: ${(err as Error).message}`);
    }
  }
  return h;
}

/** TCP segments sent and retransmitted so far on this host (Linux; null elsewhere). */
export async function tcpCounters(): Promise<{ out: number; retrans: number } | null> {
  try {
    const lines = (await readFile('/proc/net/snmp', 'utf8')).split('\n').filter((l) => l.startsWith('Tcp:'));
    const [names, values] = lines.map((l) => l.trim().split(/\s+/).slice(1));
    const at = (k: string) => Number(values![names!.indexOf(k)]);
    const out = at('OutSegs'), retrans = at('RetransSegs');
    return Number.isFinite(out) && Number.isFinite(retrans) ? { out, retrans } : null;
  } catch {
    return null;
  }
}

/** Collective: every rank calls it; rank 0's result is the stage's. */
export async function connectivityStage(comm: Communicator, cfg: PocConfig): Promise<StageResult> {
  const t0 = performance.now();
  const c = cfg.connectivity;
  const ranks = await comm.allGatherObject(await rankHealth(comm));
  // Versions must agree: a mixed install computes or serialises differently.
  for (const r of ranks) {
    if (r.node !== ranks[0]!.node) r.problems.push(`Node ${r.node}, rank 0 runs ${ranks[0]!.node}`);
    if (r.backendVersion !== ranks[0]!.backendVersion) r.problems.push(`${r.backendVersion}, rank 0 runs ${ranks[0]!.backendVersion}`);
  }
  const healthy = ranks.filter((r) => r.problems.length === 0).length;

  // Counters are per host: each host's delta is summed over its first rank only.
  const before = await tcpCounters();
  const sweep = await allReduceSweep(comm, { minBytes: c.minBytes, maxBytes: c.maxBytes, iters: c.iters, warmup: c.warmup });
  const after = await tcpCounters();
  const firstOnHost = ranks.find((r) => r.host === hostname())!.rank === comm.rank;
  const delta = before && after && firstOnHost ? [after.out - before.out, after.retrans - before.retrans] : [0, 0];
  const known = before && after ? 1 : 0;
  const [outSegs, retrans, hostsKnown] = (await comm.allGatherObject([...delta, known])).reduce((a, v) => a.map((x, i) => x + v[i]!), [0, 0, 0]);
  const retransPct = hostsKnown === comm.size && outSegs! > 0 ? (100 * retrans!) / outSegs! : hostsKnown === comm.size ? 0 : null;
  const peak = Math.max(...sweep.rows.map((r) => r.busBw));

  const stage = 'connectivity' as const;
  return {
    stage,
    gates: [
      gate({ stage, name: 'healthy ranks', measured: healthy, threshold: comm.size, kind: 'min', unit: 'ranks', note: ranks.flatMap((r) => r.problems.map((p) => `rank ${r.rank}: ${p}`)).join('; ') || undefined }),
      gate({ stage, name: 'all-reduce wrong results', measured: sweep.errors, threshold: 0, kind: 'max', unit: 'measurements' }),
      gate({ stage, name: 'all-reduce peak busbw', measured: peak, threshold: c.minBusBwGBs, kind: 'min', unit: 'GB/s', note: `sweep ${c.minBytes} B..${c.maxBytes} B on ${comm.backend}` }),
      gate({
        stage, name: 'TCP retransmissions', measured: retransPct, threshold: c.maxRetransPct, kind: 'max', unit: '%',
        note: retransPct === null ? '/proc/net/snmp not readable on every rank' : `${retrans} of ${outSegs} segments`,
      }),
    ],
    metrics: { ranks, sweep: sweep.rows, avgBusBw: sweep.avgBusBw, peakBusBw: peak, tcp: { outSegs, retransSegs: retrans }, backend: comm.backend, worldSize: comm.size },
    plots: [{
      id: 'busbw', title: `All-reduce bus bandwidth vs size (${comm.size} ranks, ${comm.backend})`,
      spec: {
        mark: { type: 'line', point: true },
        encoding: { x: { field: 'bytes', type: 'quantitative', scale: { type: 'log', base: 2 }, title: 'message size (bytes)' }, y: { field: 'busBw', type: 'quantitative', title: 'busbw (GB/s)' } },
      },
      rows: sweep.rows.map((r) => ({ bytes: r.bytes, busBw: r.busBw })),
    }],
    seconds: (performance.now() - t0) / 1000,
  };
}
