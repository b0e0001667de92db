/**
 * sendrecv_perf: a ring, send to rank+1 and receive from rank-1; busbw = algbw.
 * Point-to-point calls block until the peer posts its match and run in issue
 * order, so even ranks send first and odd ranks receive first (no cycle of waits).
 */
import { bandwidth, sameCounts, type Collective } from '../collective.js';

export const sendrecv: Collective = {
  name: 'sendrecv',
  redop: 'op',
  rooted: false,
  inPlaceUnchecked: true,
  counts: (count) => sameCounts(count),
  bw: (count, ts, sec) => bandwidth(count * ts, sec, 1),
  async initData(a) {
    const c = a.counts;
    await a.dev.zero(a.recv.at(0, c.recvCount));
    const data = a.inPlace ? a.recv : a.send;
    await a.dev.prepareInput(data.at(0, c.sendCount), a.dtype, 'nil', 1, 0, a.rep, a.rank * c.sendCount);
    const peer = (a.rank - 1 + a.nranks) % a.nranks;
    await a.dev.prepareInput(a.expected.at(0, c.recvCount), a.dtype, 'nil', 1, 0, a.rep, peer * c.recvCount);
  },
  run(a) {
    const n = a.nranks;
    if (n === 1) return Promise.resolve(a.inPlace ? undefined : a.dev.copy(a.recv, a.send));
    const to = (a.rank + 1) % n;
    const from = (a.rank - 1 + n) % n;
    const o = { dtype: a.dtype };
    if (a.rank % 2 === 0) {
      const s = a.comm.send(a.send, to, o);
      return Promise.all([s, a.comm.recv(a.recv, from, o)]);
    }
    const r = a.comm.recv(a.recv, from, o);
    return Promise.all([a.comm.send(a.send, to, o), r]);
  },
};
