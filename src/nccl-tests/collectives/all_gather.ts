/** all_gather_perf: count is per rank; algbw counts all n blocks; busbw = algbw x (n-1)/n. */
import { bandwidth, perRank, type Collective, type InitArgs } from '../collective.js';

/** Each rank's block comes from its own seed (33*rep + rank), as in nccl-tests. */
export async function gatheredBlocks(a: InitArgs): Promise<void> {
  const c = a.counts;
  await a.dev.zero(a.recv.at(0, c.recvCount));
  const data = a.inPlace ? a.recv.at(a.rank * c.sendCount, c.sendCount) : a.send.at(0, c.sendCount);
  await a.dev.prepareInput(data, a.dtype, 'nil', 1, 0, 33 * a.rep + a.rank, 0);
  for (let j = 0; j < a.nranks; j++) {
    await a.dev.prepareInput(a.expected.at(j * c.sendCount, c.sendCount), a.dtype, 'nil', 1, 0, 33 * a.rep + j, 0);
  }
}

export const allGather: Collective = {
  name: 'all_gather',
  redop: 'none',
  rooted: false,
  counts(count, elt, n) {
    const base = perRank(count, elt, n);
    return { sendCount: base, recvCount: base * n, paramCount: base, sendInplaceOffset: base, recvInplaceOffset: 0 };
  },
  bw: (count, ts, sec, n) => bandwidth(count * ts * n, sec, (n - 1) / n),
  initData: gatheredBlocks,
  run: (a) => a.comm.allGather(a.send, a.recv, { dtype: a.dtype }),
};
