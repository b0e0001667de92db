/** alltoall_perf: count is per peer; busbw = algbw x (n-1)/n; in-place results unchecked (N/A). */
import { bandwidth, perRank, type Collective } from '../collective.js';

export const alltoall: Collective = {
  name: 'alltoall',
  redop: 'none',
  rooted: false,
  inPlaceUnchecked: true,
  counts(count, elt, n) {
    const param = perRank(count, elt, n);
    return { sendCount: param * n, recvCount: param * n, paramCount: param, sendInplaceOffset: 0, recvInplaceOffset: 0 };
  },
  bw: (count, ts, sec, n) => bandwidth(count * n * ts, sec, (n - 1) / n),
  async initData(a) {
    const c = a.counts;
    await a.dev.zero(a.recv.at(0, c.recvCount));
    const data = a.inPlace ? a.recv : a.send;
    await a.dev.prepareInput(data.at(0, c.sendCount), a.dtype, 'nil', 1, 0, 33 * a.rep + a.rank, 0);
    const part = c.sendCount / a.nranks;
    for (let j = 0; j < a.nranks; j++) {
      await a.dev.prepareInput(a.expected.at(j * part, part), a.dtype, 'nil', 1, 0, 33 * a.rep + j, a.rank * part);
    }
  },
  run: (a) => a.comm.allToAll(a.send, a.recv, { dtype: a.dtype }),
};
