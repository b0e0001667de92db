/** gather_perf: count is per rank; algbw counts all n blocks; busbw = algbw x (n-1)/n. */
import { bandwidth, perRank, type Collective } from '../collective.js';

export const gather: Collective = {
  name: 'gather',
  redop: 'none',
  rooted: true,
  counts(count, elt, n) {
    const s = perRank(count, elt, n);
    return { sendCount: s, recvCount: s * n, paramCount: s, sendInplaceOffset: s, recvInplaceOffset: 0 };
  },
  bw: (count, ts, sec, n) => bandwidth(count * n * ts, sec, (n - 1) / n),
  async initData(a) {
    const c = a.counts;
    const recv = a.recv.at(0, c.recvCount);
    await a.dev.zero(recv);
    const data = a.inPlace ? a.recv.at(a.rank * c.sendCount, c.sendCount) : a.send.at(0, c.sendCount);
    await a.dev.prepareInput(data, a.dtype, 'nil', 1, 0, a.rep, a.rank * c.sendCount);
    await a.dev.copy(a.expected.at(0, c.recvCount), recv);
    if (a.rank === a.root) await a.dev.prepareInput(a.expected.at(0, c.recvCount), a.dtype, 'nil', 1, 0, a.rep, 0);
  },
  run: (a) => a.comm.gather(a.send, a.rank === a.root ? a.recv : null, { root: a.root, dtype: a.dtype }),
};
