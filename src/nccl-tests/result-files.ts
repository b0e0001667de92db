/**
 * Machine-readable results: nccl-tests' JSON layout (JSON_FILE_VERSION 3: config,
 * devices, results with out_of_place/in_place, out_of_bounds, average_bus_bandwidth)
 * plus an "nccl_node" block with the environment, and a CSV with every row.
 */
import { closeSync, openSync, writeFileSync, writeSync } from 'node:fs';
import type { BenchConfig } from './config.js';
import type { MeasurementRecord, Row } from './driver.js';
import type { RankLine } from './text-format.js';

export const JSON_FILE_VERSION = 3;

/** Variables that tune NCCL, Gloo or this library; secrets never leave the machine. */
export function tuningEnv(env: NodeJS.ProcessEnv = process.env): string[] {
  return Object.keys(env)
    .filter((k) => /^(NCCL_|GLOO_|NCCL_NODE_|CUDA_VISIBLE_DEVICES$|UCX_|FI_)/.test(k) && !/TOKEN|SECRET|PASSWORD|KEY/i.test(k))
    .sort()
    .map((k) => `${k}=${env[k]}`);
}

/** jsonOutputInit's probing: file, then file.0, file.1, ... never overwriting. */
export function openExclusive(path: string): { fd: number; path: string } | undefined {
  for (let i = -1; i < 1000; i++) {
    const p = i < 0 ? path : `${path}.${i}`;
    try {
      return { fd: openSync(p, 'wx'), path: p };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') return undefined;
    }
  }
  return undefined;
}

const fmtTime = (d: Date) => {
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
};

export interface ReportMeta {
  program: string;
  args: string[];
  startTime: Date;
  backend: string;
  backendVersion: string;
  ncclVersion: number;
  nodeVersion: string;
  packageVersion: string;
  worldSize: number;
  ranks: RankLine[];
  checkCollectives: boolean;
}

export interface ReportSummary {
  rows: Row[];
  outOfBounds: number;
  avgBusBw: number;
  minBw: number | undefined;
  errors: string[];
}

const hex = (r: RankLine) => `${r.pci[0].toString(16).padStart(4, '0')}:${r.pci[1].toString(16).padStart(2, '0')}:${r.pci[2].toString(16).padStart(2, '0')}`;

function measurement(m: MeasurementRecord, report: boolean, cputime: boolean) {
  const out: Record<string, unknown> = {
    [cputime ? 'cpu_time' : 'time']: m.timeUs,
    alg_bw: m.algBw,
    bus_bw: m.busBw,
    nwrong: m.wrong === undefined || !report ? null : m.wrong,
  };
  return out;
}

export function buildJson(meta: ReportMeta, cfg: BenchConfig, s: ReportSummary): Record<string, unknown> {
  const f = cfg.flags;
  const bool = (v: unknown) => (v ? 'true' : 'false'); // nccl-tests writes booleans as strings
  return {
    version: JSON_FILE_VERSION,
    start_time: fmtTime(meta.startTime),
    args: meta.args,
    env: tuningEnv(),
    nccl_version: meta.ncclVersion,
    config: {
      nthreads: f.nthreads, ngpus: f.ngpus, minimum_bytes: f.minbytes, maximum_bytes: f.maxbytes,
      ...(f.stepfactor > 1 ? { step_factor: f.stepfactor } : { step_bytes: f.stepbytes }),
      warmup_iters: f.warmup_iters, iterations: f.iters, aggregated_iterations: f.agg_iters, validation: f.check,
      graph: f.cudagraph, blocking_collectives: bool(f.blocking), per_iter_timing: bool(f.per_iter_timing),
      per_iter_skip: f.per_iter_skip, parallel_init: bool(f.parallel_init),
      devices: meta.ranks.map((r) => ({ rank: r.rank, group: r.group, pid: r.pid, hostname: r.host, device: r.device, device_hex: hex(r), device_info: r.name })),
    },
    results: s.rows.map((r) => ({
      size: r.size, count: r.count, type: r.type, redop: r.redop, root: String(r.root).padStart(6),
      out_of_place: measurement(r.outOfPlace, true, !!f.report_cputime),
      ...(r.outOfPlace.perIter ? { out_of_place_per_iter: perIter(r.outOfPlace) } : {}),
      in_place: measurement(r.inPlace, true, !!f.report_cputime),
      ...(r.inPlace.perIter ? { in_place_per_iter: perIter(r.inPlace) } : {}),
      actual_iterations: f.iters, experiment_name: '',
      collective: r.collective,
    })),
    out_of_bounds: { count: s.outOfBounds, okay: bool(s.outOfBounds === 0) },
    average_bus_bandwidth: { bandwidth: s.avgBusBw, okay: s.minBw === undefined ? 'unchecked' : bool(s.avgBusBw >= s.minBw * 0.9) },
    errors: s.errors,
    nccl_node: {
      version: meta.packageVersion, program: meta.program, backend: meta.backend, backend_version: meta.backendVersion,
      node_version: meta.nodeVersion, world_size: meta.worldSize, check_collectives: meta.checkCollectives,
      hosts: [...new Set(meta.ranks.map((r) => r.host))], devices: meta.ranks.map((r) => r.name),
    },
    end_time: fmtTime(new Date()),
  };
}

function perIter(m: MeasurementRecord) {
  const p = m.perIter!;
  return {
    skipped_iterations: p.skipped, min_us: p.min, max_us: p.max, avg_us: p.avg, p50_us: p.p50, p95_us: p.p95,
    p99_us: p.p99, stdev_us: p.stdev, cv_pct: p.cvPct, times_us: p.timesUs,
    // nccl-tests writes the per-process rows only when there is more than one process
    ...(p.processTimesUs.length > 1 ? { per_process_max_times_us: p.processTimesUs } : {}),
  };
}

export function writeJson(fd: number, doc: Record<string, unknown>): void {
  writeSync(fd, `${JSON.stringify(doc, null, 1)}\n`);
  closeSync(fd);
}

const CSV_COLUMNS = [
  'record', 'collective', 'size', 'count', 'type', 'redop', 'root',
  'oop_time_us', 'oop_algbw', 'oop_busbw', 'oop_wrong', 'ip_time_us', 'ip_algbw', 'ip_busbw', 'ip_wrong',
  'avg_busbw', 'backend', 'backend_version', 'nccl_node_version', 'world_size', 'hosts', 'devices', 'env', 'start_time',
];

const cell = (v: unknown) => {
  const s = v === undefined || v === null ? '' : String(v);
  return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
};

/** One "row" record per size and a final "summary" record; the environment rides on every record. */
export function buildCsv(meta: ReportMeta, s: ReportSummary): string {
  const envCols = [meta.backend, meta.backendVersion, meta.packageVersion, meta.worldSize,
    [...new Set(meta.ranks.map((r) => r.host))].join(' '), [...new Set(meta.ranks.map((r) => r.name))].join(' | '),
    tuningEnv().join(' '), fmtTime(meta.startTime)];
  const lines = [CSV_COLUMNS.join(',')];
  const m = (x: MeasurementRecord) => [x.timeUs, x.algBw, x.busBw, x.wrong === undefined ? 'N/A' : x.wrong];
  for (const r of s.rows) {
    lines.push(['row', r.collective, r.size, r.count, r.type, r.redop, r.root, ...m(r.outOfPlace), ...m(r.inPlace), '', ...envCols].map(cell).join(','));
  }
  lines.push(['summary', meta.program.replace(/_perf$/, ''), '', '', '', '', '', '', '', '', s.outOfBounds, '', '', '', '', s.avgBusBw, ...envCols].map(cell).join(','));
  return `${lines.join('\n')}\n`;
}

export function writeCsv(path: string, text: string): void {
  writeFileSync(path, text);
}
