/**
 * group(async () => { ... }): NCCL's ncclGroupStart / ncclGroupEnd for one or more
 * communicators. Calls made inside the callback are fused into one NCCL group per
 * communicator, so sends and receives that must progress together (a ring exchange)
 * do not deadlock. Inside the group, each call's Work resolves once it is queued;
 * the promise group() returns resolves when all of the group's work is done on the
 * GPU (it is the group's completion, as in NCCL). Make the calls without awaiting
 * other GPU work in between.
 */
import { NcclNodeError } from '../../errors.js';
import type { Buffer, Communicator } from '../communicator.js';
import type { Work } from '../work.js';
import { DEFAULT_TIMEOUT_MS } from '../init.js';
import { pending, type NcclComm } from './nccl-comm.js';

export async function group<T>(fn: () => T | Promise<T>, options: { timeoutMs?: number } = {}): Promise<T> {
  if (pending.group) return await fn();  // nested: part of the enclosing group
  const members = new Set<NcclComm>();
  pending.group = members;
  let result: T;
  try {
    result = await fn();
  } finally {
    pending.group = undefined;
    // Every communicator that got a grouped call must end its group, even on error.
    const ends = [...members].map((c) => c.endGroup(options.timeoutMs ?? DEFAULT_TIMEOUT_MS));
    await Promise.all(ends);
  }
  return result;
}

function requireNccl(comm: Communicator, call: string): void {
  if (comm.backend !== 'nccl') {
    throw new NcclNodeError('ERR_UNAVAILABLE', `${call}: the pre-multiplied sum needs the nccl backend (this communicator uses ${comm.backend})`);
  }
}

/** allReduce of scalar * buf over ranks (ncclRedOpCreatePreMulSum), e.g. scalar = 1 / size. */
export function allReducePreMulSum(comm: Communicator, buf: Buffer, scalar: number, options: { out?: Buffer; timeoutMs?: number } = {}): Work {
  requireNccl(comm, 'allReducePreMulSum');
  return comm._preMulSum('allReduce', buf, undefined, scalar, options);
}

/** reduceScatter of scalar * input over ranks. */
export function reduceScatterPreMulSum(comm: Communicator, input: Buffer, output: Buffer, scalar: number, options: { timeoutMs?: number } = {}): Work {
  requireNccl(comm, 'reduceScatterPreMulSum');
  return comm._preMulSum('reduceScatter', input, output, scalar, options);
}
