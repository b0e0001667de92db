/**
 * broadcast_perf: busbw = algbw. The communicator broadcasts in place, so out of
 * place the root first copies send into recv (a memcpy inside the timed region,
 * small next to the transfer; the NCCL path does the same on the device).
 */
import { bandwidth, sameCounts, type Collective } from '../collective.js';

export const broadcast: Collective = {
  name: 'broadcast',
  redop: 'none',
  rooted: true,
  counts: (count) => sameCounts(count),
  bw: (count, ts, sec) => bandwidth(count * ts, sec, 1),
  async initData(a) {
    const c = a.counts;
    await a.dev.zero(a.recv.at(0, c.recvCount));
    const data = a.inPlace ? a.recv : a.send;
    if (a.rank === a.root) await a.dev.prepareInput(data.at(0, c.sendCount), a.dtype, 'nil', 1, 0, a.rep, 0);
    await a.dev.prepareInput(a.expected.at(0, c.recvCount), a.dtype, 'nil', 1, 0, a.rep, 0);
  },
  run(a) {
    if (!a.inPlace && a.rank === a.root) {
      const copied = a.dev.copy(a.recv, a.send);
      if (copied) return copied.then(() => a.comm.broadcast(a.recv, { root: a.root, dtype: a.dtype }));
    }
    return a.comm.broadcast(a.recv, { root: a.root, dtype: a.dtype });
  },
};
