/** all_reduce_perf: busbw = algbw x 2(n-1)/n. */
import { bandwidth, sameCounts, type Collective } from '../collective.js';

export const allReduce: Collective = {
  name: 'all_reduce',
  redop: 'op',
  rooted: false,
  counts: (count) => sameCounts(count),
  bw: (count, ts, sec, n) => bandwidth(count * ts, sec, (2 * (n - 1)) / n),
  async initData(a) {
    const c = a.counts;
    await a.dev.zero(a.recv.at(0, c.recvCount));
    const data = a.inPlace ? a.recv : a.send;
    await a.dev.prepareInput(data.at(0, c.sendCount), a.dtype, a.op!, a.nranks, a.rank, a.rep, 0);
    await a.dev.prepareExpected(a.expected.at(0, c.recvCount), a.dtype, a.op!, a.nranks, a.rep, 0);
  },
  run: (a) =>
    a.inPlace
      ? a.comm.allReduce(a.recv, { op: a.op!, dtype: a.dtype })
      : a.comm.allReduce(a.send, { out: a.recv, op: a.op!, dtype: a.dtype }),
};
