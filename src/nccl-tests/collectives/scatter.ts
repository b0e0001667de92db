/** scatter_perf: count is per rank; algbw counts all n blocks; busbw = algbw x (n-1)/n. */
import { bandwidth, perRank, type Collective } from '../collective.js';

export const scatter: Collective = {
  name: 'scatter',
  redop: 'none',
  rooted: true,
  counts(count, elt, n) {
    const r = perRank(count, elt, n);
    return { sendCount: r * n, recvCount: r, paramCount: r, sendInplaceOffset: 0, recvInplaceOffset: r };
  },
  bw: (count, ts, sec, n) => bandwidth(count * n * ts, sec, (n - 1) / n),
  async initData(a) {
    const c = a.counts;
    await a.dev.zero(a.recv.at(0, c.recvCount));
    const data = a.inPlace ? a.recv : a.send;
    if (a.rank === a.root) await a.dev.prepareInput(data.at(0, c.sendCount), a.dtype, 'nil', 1, 0, a.rep, 0);
    await a.dev.prepareInput(a.expected.at(0, c.recvCount), a.dtype, 'nil', 1, 0, a.rep, a.rank * c.recvCount);
  },
  run: (a) => a.comm.scatter(a.rank === a.root ? a.send : null, a.recv, { root: a.root, dtype: a.dtype }),
};
