/** reduce_perf: busbw = algbw; only the root's output changes. */
import { bandwidth, sameCounts, type Collective } from '../collective.js';

export const reduce: Collective = {
  name: 'reduce',
  redop: 'op',
  rooted: true,
  counts: (count) => sameCounts(count),
  bw: (count, ts, sec) => bandwidth(count * ts, sec, 1),
  async initData(a) {
    const c = a.counts;
    const recv = a.recv.at(0, c.recvCount);
    await a.dev.zero(recv);
    const data = a.inPlace ? a.recv : a.send;
    await a.dev.prepareInput(data.at(0, c.sendCount), a.dtype, a.op!, a.nranks, a.rank, a.rep, 0);
    // Other ranks' recv buffers must come back untouched: expect what is there now.
    await a.dev.copy(a.expected.at(0, c.recvCount), recv);
    if (a.rank === a.root) await a.dev.prepareExpected(a.expected.at(0, c.recvCount), a.dtype, a.op!, a.nranks, a.rep, 0);
  },
  run: (a) =>
    a.inPlace
      ? a.comm.reduce(a.recv, { op: a.op!, root: a.root, dtype: a.dtype })
      : a.comm.reduce(a.send, { out: a.recv, op: a.op!, root: a.root, dtype: a.dtype }),
};
