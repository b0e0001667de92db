/** reduce_scatter_perf: count is per rank; algbw counts all n blocks; busbw = algbw x (n-1)/n. */
import { bandwidth, perRank, type Collective } from '../collective.js';

export const reduceScatter: Collective = {
  name: 'reduce_scatter',
  redop: 'op',
  rooted: false,
  counts(count, elt, n) {
    const base = perRank(count, elt, n);
    return { sendCount: base * n, recvCount: base, paramCount: base, sendInplaceOffset: 0, recvInplaceOffset: base };
  },
  bw: (count, ts, sec, n) => bandwidth(count * ts * n, sec, (n - 1) / n),
  async initData(a) {
    const c = a.counts;
    await a.dev.zero(a.recv.at(0, c.recvCount));
    const data = a.inPlace ? a.recv : a.send;
    await a.dev.prepareInput(data.at(0, c.sendCount), a.dtype, a.op!, a.nranks, a.rank, a.rep, 0);
    await a.dev.prepareExpected(a.expected.at(0, c.recvCount), a.dtype, a.op!, a.nranks, a.rep, a.rank * c.recvCount);
  },
  run: (a) => a.comm.reduceScatter(a.send, a.recv, { op: a.op!, dtype: a.dtype }),
};
