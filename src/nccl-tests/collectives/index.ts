/** The ten nccl-tests collectives by name; `all_reduce_perf` and `all_reduce` both work. */
import type { Collective } from '../collective.js';
import { allGather } from './all_gather.js';
import { allReduce } from './all_reduce.js';
import { alltoall } from './alltoall.js';
import { broadcast } from './broadcast.js';
import { gather } from './gather.js';
import { hypercube } from './hypercube.js';
import { reduce } from './reduce.js';
import { reduceScatter } from './reduce_scatter.js';
import { scatter } from './scatter.js';
import { sendrecv } from './sendrecv.js';

export const COLLECTIVES: readonly Collective[] = [
  allReduce, allGather, broadcast, reduceScatter, reduce, alltoall, gather, scatter, sendrecv, hypercube,
];

/** Accepts all_reduce, all_reduce_perf, all_reduce_perf_mpi, allreduce, all-reduce. */
export function findCollective(name: string): Collective | undefined {
  const key = name.toLowerCase().replace(/-/g, '_').replace(/(_perf)(_mpi)?$/, '').replace(/_/g, '');
  return COLLECTIVES.find((c) => c.name.replace(/_/g, '') === key);
}
