/**
 * nccl-tests' command line (src/common.cu, getopt string
 * "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:"): the same short
 * and long names and defaults, parsed with commander, plus nccl-node's own
 * --nproc-per-node, --backend and --csv.
 */
import { InvalidArgumentError, Option, type Command } from 'commander';

/** nccl-tests' parsesize: a number with an optional K/M/G (binary) suffix. */
export function parseSize(value: string): number {
  const m = /^\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([a-zA-Z]?)\s*$/.exec(value);
  if (!m) return -1;
  const unit = { '': 1, k: 1024, m: 1024 ** 2, g: 1024 ** 3 }[m[2]!.toLowerCase()];
  if (unit === undefined) return -1;
  return Math.floor(Number(m[1]) * unit);
}

/** strtol(s, NULL, 0), but a value with no number at all is an error rather than 0. */
export function parseCInt(value: string): number {
  const m = /^\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9]\d*)/.exec(value);
  if (!m) throw new InvalidArgumentError('expected an integer');
  const body = m[2]!;
  const v = /^0[xX]/.test(body) ? parseInt(body, 16) : body.length > 1 && body.startsWith('0') ? parseInt(body, 8) : parseInt(body, 10);
  return m[1] === '-' ? -v : v;
}

function size(what: string) {
  return (value: string): number => {
    const v = parseSize(value);
    if (v < 0) throw new InvalidArgumentError(`invalid size specified for '${what}'`);
    return v;
  };
}

export interface BenchFlags {
  nthreads: number;
  ngpus: number;
  minbytes: number;
  maxbytes: number;
  stepbytes: number;
  stepfactor: number;
  iters: number;
  agg_iters: number;
  warmup_iters: number;
  run_cycles: number;
  parallel_init: number;
  check: number;
  op: string;
  datatype: string;
  root: number;
  blocking: number;
  stream_null: number;
  timeout: number;
  cudagraph: number;
  report_cputime: number;
  report_timestamps: number;
  output_file?: string;
  average: number;
  local_register: number;
  cta_policy?: number;
  device_implementation: number;
  device_cta_count: number;
  memory: number;
  unalign: number;
  per_iter_timing: number;
  per_iter_skip: number;
  nprocPerNode?: number;
  backend: 'auto' | 'gloo' | 'nccl';
  csv?: string;
  checkCollectives: boolean;
}

/** [short, long, default, help, parser]; the defaults are nccl-tests' global initial values. */
const NCCL_TESTS_OPTIONS: Array<[string, string, unknown, string, ((v: string) => unknown)?]> = [
  ['t', 'nthreads', 1, 'threads per process (nccl-node: 1; one process per rank)'],
  ['g', 'ngpus', 1, 'GPUs per thread (nccl-node: 1)'],
  ['b', 'minbytes', 32 * 1024 * 1024, 'min size in bytes (K/M/G suffixes)', size('minbytes')],
  ['e', 'maxbytes', 32 * 1024 * 1024, 'max size in bytes', size('maxbytes')],
  ['i', 'stepbytes', 1024 * 1024, 'increment size', size('stepBytes')],
  ['f', 'stepfactor', 1, 'increment factor (used when > 1)'],
  ['n', 'iters', 20, 'iteration count'],
  ['m', 'agg_iters', 1, 'aggregated iteration count'],
  ['w', 'warmup_iters', 1, 'warmup iteration count (every size, doubling)'],
  ['N', 'run_cycles', 1, 'run & print each cycle (0=infinite)'],
  ['p', 'parallel_init', 0, 'threads initialise in parallel <0/1>'],
  ['c', 'check', 1, 'check iteration count (0 disables)'],
  ['o', 'op', 'sum', 'sum/prod/min/max/avg/mulsum/all', String],
  ['d', 'datatype', 'float', 'nccltype/all', String],
  ['r', 'root', 0, 'root (-1 sweeps all roots)'],
  ['z', 'blocking', 0, '<0/1/2/3> 1=barrier after each inner iter (-m), 2=no barrier, 3=wait and barrier after each outer iter (-n)'],
  ['y', 'stream_null', 0, 'use the NULL stream <0/1>'],
  ['T', 'timeout', 0, 'timeout in seconds (0 = none)'],
  ['G', 'cudagraph', 0, 'number of CUDA graph launches'],
  ['C', 'report_cputime', 0, 'report CPU time instead of latency <0/1>'],
  ['S', 'report_timestamps', 0, 'report timestamps <0/1>'],
  ['J', 'output_file', undefined, 'write results to this file (JSON when it ends in .json)', String],
  ['a', 'average', 1, 'report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>'],
  ['R', 'local_register', 0, 'local (1) or symmetric (2) buffer registration'],
  ['x', 'cta_policy', undefined, 'CTA policy <0/1/2>'],
  ['D', 'device_implementation', 0, 'device implementation number (needs -R 2)'],
  ['V', 'device_cta_count', 16, 'CTAs for the device implementation'],
  ['M', 'memory', 0, 'memory usage report <0/1>'],
  ['u', 'unalign', 0, 'misalign buffers by this many elements'],
  ['I', 'per_iter_timing', 0, 'per-iteration timing <0/1>'],
  ['K', 'per_iter_skip', 0, 'exclude leading samples from -I statistics'],
];

export const FLAG_DEFAULTS: Readonly<Record<string, unknown>> = Object.fromEntries(NCCL_TESTS_OPTIONS.map(([, long, d]) => [long, d]));

/** Adds nccl-tests' flags and ours to the bench command. */
export function addBenchOptions(cmd: Command): Command {
  for (const [short, long, def, help, parse] of NCCL_TESTS_OPTIONS) {
    const o = new Option(`-${short}, --${long} <value>`, help).argParser(parse ?? parseCInt);
    if (def !== undefined) o.default(def);
    cmd.addOption(o);
  }
  cmd.addOption(new Option('--nproc-per-node <n>', 'start this many local ranks (else run as one rank of the job in the environment)').argParser(parseCInt));
  cmd.addOption(new Option('--backend <name>', 'communication backend').choices(['auto', 'gloo', 'nccl']).default('auto'));
  cmd.addOption(new Option('--csv <file>', 'also write every row and the environment as CSV'));
  // Measures the per-collective agreement check's cost (it is on by default).
  cmd.addOption(new Option('--no-check-collectives', 'skip the per-call cross-rank agreement check').hideHelp());
  return cmd;
}
