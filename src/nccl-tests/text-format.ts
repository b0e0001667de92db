/**
 * nccl-tests' text report (src/util.cu of nccl-tests 2.19.6), line by line: the
 * same format strings and widths, so scripts that parse nccl-tests read ours.
 */
import { expo, general, getFloatStr, padLeft, padRight } from './printf.js';

export const NCCL_TESTS_VERSION = '2.19.6';

export interface ParamsLine {
  nThreads: number;
  nGpus: number;
  minBytes: number;
  maxBytes: number;
  stepBytes: number;
  stepFactor: number;
  warmupIters: number;
  iters: number;
  aggIters: number;
  check: number;
  graph: number;
  unalign: number;
  blocking: number;
  perIterTiming: number;
  perIterSkip: number;
  /** What -I's per-iteration times measure: nccl-tests' 'CUDA event' unless given. */
  timing?: string;
}

export interface RankLine {
  rank: number;
  group: number;
  pid: number;
  host: string;
  device: number;
  /** PCI domain/bus/device, [0000:00:00] when there is none (CPU ranks). */
  pci: [number, number, number];
  name: string;
}

const hex = (v: number, w: number) => v.toString(16).padStart(w, '0');

/** "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s" */
export function rankLine(r: RankLine): string {
  const [d, b, v] = r.pci;
  return `#  Rank ${padLeft(String(r.rank), 2)} Group ${padLeft(String(r.group), 2)} Pid ${padLeft(String(r.pid), 6)} on ${padLeft(r.host, 10)} device ${padLeft(String(r.device), 2)} [${hex(d, 4)}:${hex(b, 2)}:${hex(v, 2)}] ${r.name}`;
}

/** The header block before the table (writeDeviceReport), without the version line. */
export function headerLines(program: string, p: ParamsLine, ranks: RankLine[]): string[] {
  const step = p.stepFactor > 1 ? `${p.stepFactor}(factor)` : `${p.stepBytes}(bytes)`;
  const lines = [
    `# Collective test starting: ${program}`,
    `# nThread ${p.nThreads} nGpus ${p.nGpus} minBytes ${p.minBytes} maxBytes ${p.maxBytes} step: ${step} warmup iters: ${p.warmupIters} iters: ${p.iters} agg iters: ${p.aggIters} validation: ${p.check} graph: ${p.graph} unalign: ${p.unalign}`,
  ];
  if (p.blocking === 1) lines.push('# Blocking Enabled: wait and barrier after each inner iteration (-m) ');
  if (p.blocking === 2) lines.push('# Blocking Enabled: wait after each inner iteration (-m), no barrier ');
  if (p.blocking === 3) lines.push('# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier ');
  if (p.perIterTiming) {
    const skip = p.perIterSkip ? `; summary skips first ${p.perIterSkip} iterations` : '';
    lines.push(`# Per-Iteration Report: ${p.timing ?? 'CUDA event'} timing; i_* uses max over process rows${skip} `);
  }
  lines.push('#', '# Using devices', ...ranks.map(rankLine));
  return lines;
}

const f = (fmt: Array<[string, number]>) => fmt.map(([s, w]) => padLeft(s, w)).join('  ');

/** writeResultHeader: "#", then the two-level column header. */
export function tableHeader(cputime: boolean, timestamps: boolean, perIter: boolean): string[] {
  const t = cputime ? 'cputime' : 'time';
  const tsLbl = timestamps ? 'timestamp' : '';
  const tsFmt = timestamps ? '%Y-%m-%d %H:%M:%S' : '';
  const tsPad = timestamps ? 19 : 0;
  const pre = (a: string, b: string) => `# ${f([[a, 10], [b, 12], ['', 8], ['', 6], ['', 6]])}`;
  if (perIter) {
    const names = (x: string[]) => f(x.map((s, i) => [s, [7, 6, 6, 6, 7, 7, 7, 7][i % 8]!] as [string, number]));
    return [
      '#',
      `${pre('', '')}              out-of-place (+ per-iteration)                                in-place (+ per-iteration)`,
      `# ${f([['size', 10], ['count', 12], ['type', 8], ['redop', 6], ['root', 6]])}  ${names([t, 'algbw', 'busbw', '#wrong', 'i_min', 'i_max', 'i_p99', 'i_cv%', t, 'algbw', 'busbw', '#wrong', 'i_min', 'i_max', 'i_p99', 'i_cv%'])} ${padLeft(tsLbl, tsPad)}`,
      `${pre('(B)', '(elements)')}  ${names(['(us)', '(GB/s)', '(GB/s)', '', '(us)', '(us)', '(us)', '(%)', '(us)', '(GB/s)', '(GB/s)', '', '(us)', '(us)', '(us)', '(%)'])} ${padLeft(tsFmt, tsPad)}`,
    ];
  }
  const cols = (x: string[]) => f(x.map((s, i) => [s, [7, 6, 6, 6][i % 4]!] as [string, number]));
  return [
    '#',
    `${pre('', '')}           out-of-place                       in-place          `,
    `# ${f([['size', 10], ['count', 12], ['type', 8], ['redop', 6], ['root', 6]])}  ${cols([t, 'algbw', 'busbw', '#wrong', t, 'algbw', 'busbw', '#wrong'])} ${padLeft(tsLbl, tsPad)}`,
    `${pre('(B)', '(elements)')}  ${cols(['(us)', '(GB/s)', '(GB/s)', '', '(us)', '(GB/s)', '(GB/s)', ''])} ${padLeft(tsFmt, tsPad)}`,
  ];
}

/** writeBenchmarkLinePreamble: "%12li  %12li  %8s  %6s  %6s" (root as "%6i"). */
export function rowPreamble(size: number, count: number, type: string, redop: string, root: number): string {
  return f([[String(size), 12], [String(count), 12], [type, 8], [redop, 6], [padLeft(String(root), 6), 6]]);
}

export interface Measurement {
  timeUs: number;
  algBw: number;
  busBw: number;
  /** undefined when errors are not reported (N/A). */
  wrong: number | undefined;
}

/** writeBenchmarkLineBody: "  %7s  %6s  %6s  %6g" or "  %7s  %6s  %6s    N/A". */
export function rowBody(m: Measurement): string {
  const head = `  ${getFloatStr(m.timeUs, 7)}  ${getFloatStr(m.algBw, 6)}  ${getFloatStr(m.busBw, 6)}`;
  return m.wrong === undefined ? `${head}    N/A` : `${head}  ${padLeft(general(m.wrong), 6)}`;
}

export interface IterStatsUs {
  min: number;
  max: number;
  p99: number;
  cvPct: number;
}

/** writePerIterReport: "  %7s  %7s  %7s  %7s". */
export function perIterBody(s: IterStatsUs): string {
  return `  ${[s.min, s.max, s.p99, s.cvPct].map((v) => getFloatStr(v, 7)).join('  ')}`;
}

/** writeTimestamp: "%21s" of "%Y-%m-%d %H:%M:%S" in local time. */
export function timestamp(d = new Date()): string {
  const p = (n: number) => String(n).padStart(2, '0');
  return padLeft(`${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`, 21);
}

/**
 * writeResultFooter + finalizeFooter + writeErrors. minBw is NCCL_TESTS_MIN_BW
 * (undefined when unset); error is the last backend error, if any.
 */
export function footerLines(program: string, outOfBounds: number, avgBusBw: number, minBw: number | undefined, error?: string, memoryLine?: string): string[] {
  const verdict = minBw === undefined ? '' : avgBusBw < minBw * 0.9 ? 'FAILED' : 'OK';
  return [
    `# ${padRight('Out of bounds values', 20)} : ${outOfBounds} ${outOfBounds ? 'FAILED' : 'OK'}`,
    `# ${padRight('Avg bus bandwidth', 20)} : ${general(avgBusBw)} ${verdict}`,
    '#',
    `# Collective test concluded: ${program}`,
    ...(memoryLine ? [memoryLine] : []),
    '#',
    error ? `# error: ${error}` : '',
  ];
}

export { expo };
