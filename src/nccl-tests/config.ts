/**
 * From parsed flags to what the driver runs: the type/op/root sweeps and the
 * nccl-tests consistency rules, plus a clear note for every flag the chosen
 * backend cannot honour (CUDA graphs, buffer registration, ... on Gloo).
 */
import type { DType, ReduceOp } from '../dtypes.js';
import type { BenchFlags } from './flags.js';

/** nccl-tests' type names (test_typenames) and ours. */
export const TYPE_NAMES: ReadonlyArray<[string, DType | undefined]> = [
  ['int8', 'int8'], ['uint8', 'uint8'], ['int32', 'int32'], ['uint32', 'uint32'], ['int64', 'int64'], ['uint64', 'uint64'],
  ['half', 'float16'], ['float', 'float32'], ['double', 'float64'], ['bfloat16', 'bfloat16'],
  ['f8e4m3', undefined], ['f8e5m2', undefined],
];
export const OP_NAMES = ['sum', 'prod', 'max', 'min', 'avg', 'mulsum'] as const;

export interface TypeChoice { name: string; dtype: DType }
export interface OpChoice { name: string; op: ReduceOp }

export interface BenchConfig {
  flags: BenchFlags;
  types: TypeChoice[];
  ops: OpChoice[];
  /** Lines printed on stdout by rank 0 before the header (nccl-tests prints these too). */
  notices: string[];
  /** Lines for stderr: flags this backend cannot honour. */
  warnings: string[];
}

export class UsageError extends Error {}

const ALIASES: Record<string, string> = { float16: 'half', float32: 'float', float64: 'double', bf16: 'bfloat16' };

function pickTypes(name: string, backend: string, notices: string[], warnings: string[]): TypeChoice[] {
  const real = TYPE_NAMES.filter((t): t is [string, DType] => t[1] !== undefined);
  if (name === 'all') return real.map(([n, d]) => ({ name: n, dtype: d }));
  const wanted = ALIASES[name] ?? name;
  const hit = TYPE_NAMES.find(([n]) => n === wanted);
  if (hit && hit[1]) return [{ name: hit[0], dtype: hit[1] }];
  if (hit) warnings.push(`-d ${name}: fp8 types are not supported by the ${backend} backend of nccl-node; using float`);
  else notices.push(`invalid type ${name}, defaulting to float .. `);
  return [{ name: 'float', dtype: 'float32' }];
}

function pickOps(name: string, backend: string, notices: string[], warnings: string[]): OpChoice[] {
  const supported = OP_NAMES.filter((o): o is ReduceOp & (typeof OP_NAMES)[number] => o !== 'mulsum');
  if (name === 'all') {
    warnings.push(`-o all: mulsum (PreMulSum) is not available on the ${backend} backend; sweeping ${supported.join(', ')}`);
    return supported.map((o) => ({ name: o, op: o }));
  }
  if (name === 'mulsum') {
    throw new UsageError(`-o mulsum: PreMulSum (ncclRedOpCreatePreMulSum) is not available on the ${backend} backend of nccl-node`);
  }
  const hit = supported.find((o) => o === name);
  if (hit) return [{ name: hit, op: hit }];
  notices.push(`invalid op ${name}, defaulting to sum .. `);
  return [{ name: 'sum', op: 'sum' }];
}

/**
 * Applies nccl-tests' checks (main() in common.cu) and the backend's limits.
 * `backend` is the resolved one ('gloo' or 'nccl').
 */
export function resolveConfig(flags: BenchFlags, backend: string): BenchConfig {
  const f = { ...flags };
  const notices: string[] = [];
  const warnings: string[] = [];
  if (f.nthreads !== 1 || f.ngpus !== 1) {
    throw new UsageError(`-t ${f.nthreads} -g ${f.ngpus}: nccl-node runs one rank per process; start more ranks with --nproc-per-node (or nccl-node run, srun, mpirun)`);
  }
  if (f.minbytes > f.maxbytes) throw new UsageError(`invalid sizes for 'minbytes' and 'maxbytes': ${f.minbytes} > ${f.maxbytes}`);
  if (f.iters < 1 && f.iters !== 0) throw new UsageError(`-n ${f.iters}: expected iterations >= 0`);
  if (f.agg_iters < 1) throw new UsageError(`-m ${f.agg_iters}: expected aggregated iterations >= 1`);
  if (f.device_implementation > 0 && f.local_register !== 2) {
    throw new UsageError('device implementation (-D > 0) requires enabling symmetric memory registration (-R 2)');
  }
  if (f.per_iter_timing !== 0 && f.per_iter_timing !== 1) {
    warnings.push('per-iteration timing (-I) only supports 0=off or 1=on. Disabling.');
    f.per_iter_timing = 0;
  }
  if (f.per_iter_skip < 0 || (f.per_iter_skip && f.per_iter_skip >= f.iters)) {
    warnings.push(`per-iteration skip (-K) must be between 0 and ${f.iters - 1}. Disabling.`);
    f.per_iter_skip = 0;
  }
  if (f.per_iter_skip && !f.per_iter_timing) {
    warnings.push('per-iteration skip (-K) requires per-iteration timing (-I 1). Disabling.');
    f.per_iter_skip = 0;
  }
  if (backend !== 'nccl') {
    const gpuOnly: Array<[boolean, string]> = [
      [f.cudagraph > 0, `-G ${f.cudagraph}: CUDA graphs need the nccl backend; ${backend} runs the iterations without a graph (graph: 0)`],
      [f.local_register > 0, `-R ${f.local_register}: buffer registration needs the nccl backend; ignored on ${backend}`],
      [f.cta_policy !== undefined, `-x ${f.cta_policy}: CTA policy needs the nccl backend; ignored on ${backend}`],
      [f.device_implementation > 0, `-D ${f.device_implementation}: device-API kernels need the nccl backend; ignored on ${backend}`],
      [f.stream_null > 0, `-y ${f.stream_null}: CUDA streams need the nccl backend; ignored on ${backend}`],
      [f.memory > 0, `-M ${f.memory}: the GPU memory report needs the nccl backend; no memory line on ${backend}`],
    ];
    for (const [on, msg] of gpuOnly) if (on) warnings.push(msg);
    if (f.cudagraph > 0) f.cudagraph = 0;
    if (f.device_implementation > 0) f.device_implementation = 0;
    if (f.memory > 0) f.memory = 0;
    if (f.per_iter_timing) warnings.push(`-I 1: on ${backend} per-iteration times are host completion times, not CUDA events`);
  }
  if (f.per_iter_timing && f.cudagraph >= 1) {
    warnings.push('per-iteration timing (-I) is incompatible with CUDA graph mode (-G). Disabling.');
    f.per_iter_timing = 0;
  }
  if (f.blocking === 3 && f.cudagraph >= 1) {
    warnings.push('blocking mode (-z 3) is incompatible with CUDA graph mode (-G). Disabling.');
    f.blocking = 0;
  }
  if (f.parallel_init) warnings.push('-p: nccl-node has one rank per process; parallel init is implicit');
  const types = pickTypes(f.datatype, backend, notices, warnings);
  const ops = pickOps(f.op, backend, notices, warnings);
  return { flags: f, types, ops, notices, warnings };
}
