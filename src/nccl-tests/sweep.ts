/**
 * The all-reduce sweep of `nccl-node bench` as a library call: the same driver
 * (warm-up, timed out-of-place and in-place loops, on-device or host validation)
 * on a communicator the caller already has, returning one row per size instead
 * of printing the nccl-tests table. The POC's connectivity stage runs it.
 */
import type { Communicator } from '../comm/communicator.js';
import { NcclNodeError } from '../errors.js';
import { allReduce } from './collectives/all_reduce.js';
import { resolveConfig } from './config.js';
import { runCollective, type BenchEnv, type Control } from './driver.js';
import { FLAG_DEFAULTS, type BenchFlags } from './flags.js';
import { createGpuDevice, gpuControl } from './gpu-device.js';
import { hostDevice } from './host-device.js';

export interface SweepOptions {
  /** Smallest and largest message in bytes; sizes double in between (-f 2). */
  minBytes: number;
  maxBytes: number;
  /** Timed iterations per size (-n) and warm-up iterations (-w). */
  iters?: number;
  warmup?: number;
  /** Element type, as nccl-tests names it (default float). */
  datatype?: string;
}

export interface SweepRow {
  bytes: number;
  count: number;
  /** Out-of-place, as nccl-tests' first column group. */
  timeUs: number;
  algBw: number;
  busBw: number;
  /** Wrong elements over every rank (out-of-place + in-place). */
  wrong: number;
  inPlaceBusBw: number;
}

export interface SweepResult {
  rows: SweepRow[];
  /** Measurements with wrong results, summed over ranks. */
  errors: number;
  /** Mean out-of-place and in-place busbw over every size, as nccl-tests' "Avg bus bandwidth". */
  avgBusBw: number;
}

/** Collective: every rank of `comm` calls it with the same options. */
export async function allReduceSweep(comm: Communicator, o: SweepOptions): Promise<SweepResult> {
  if (!(Number.isInteger(o.minBytes) && Number.isInteger(o.maxBytes) && o.minBytes > 0 && o.minBytes <= o.maxBytes)) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `allReduceSweep: expected 0 < minBytes <= maxBytes (integers), received ${o.minBytes}..${o.maxBytes}`);
  }
  const flags = {
    ...FLAG_DEFAULTS, backend: comm.backend, checkCollectives: true,
    minbytes: o.minBytes, maxbytes: o.maxBytes, stepfactor: 2, iters: o.iters ?? 20, warmup_iters: o.warmup ?? 2, datatype: o.datatype ?? 'float',
  } as unknown as BenchFlags;
  const cfg = resolveConfig(flags, comm.backend);
  const gpu = comm.backend === 'nccl';
  const control: Control = gpu ? gpuControl(comm) : {
    size: comm.size, rank: comm.rank,
    async allReduce(values, op) {
      const buf = Float64Array.from(values);
      await comm.allReduce(buf, { op });
      return [...buf];
    },
    fromRank0: (values) => comm.broadcastObject(values, { root: 0 }),
    barrier: async () => void (await comm.barrier()),
  };
  const env: BenchEnv = { comm, dev: gpu ? createGpuDevice() : hostDevice, control, rank: comm.rank, nranks: comm.size, corrupt: false, print: () => {} };
  const totals = await runCollective(env, cfg, allReduce);
  const [errors] = (await control.allReduce([totals.errors], 'sum')) as [number];
  const rows = totals.rows.map((r) => ({
    bytes: r.size, count: r.count, timeUs: r.outOfPlace.timeUs, algBw: r.outOfPlace.algBw, busBw: r.outOfPlace.busBw,
    wrong: (r.outOfPlace.wrong ?? 0) + (r.inPlace.wrong ?? 0), inPlaceBusBw: r.inPlace.busBw,
  }));
  return { rows, errors, avgBusBw: totals.busBwCount ? totals.busBwSum / totals.busBwCount : 0 };
}
