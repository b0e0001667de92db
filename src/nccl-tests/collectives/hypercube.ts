/**
 * hypercube_perf: log2(n) pairwise exchanges of doubling blocks (an all-gather);
 * algbw = count x typesize x (n-1) / t, busbw = algbw. Power-of-two worlds only.
 */
import { bandwidth, perRank, type Collective } from '../collective.js';
import { gatheredBlocks } from './all_gather.js';

export const hypercube: Collective = {
  name: 'hypercube',
  redop: 'empty',
  rooted: false,
  powerOfTwo: true,
  counts(count, elt, n) {
    const base = perRank(count, elt, n);
    return { sendCount: base, recvCount: base * n, paramCount: base, sendInplaceOffset: base, recvInplaceOffset: 0 };
  },
  bw: (count, ts, sec, n) => bandwidth(count * ts * (n - 1), sec, 1),
  initData: gatheredBlocks,
  run(a) {
    const count = a.counts.paramCount;
    const block = (first: number, blocks: number) => a.dev.slice(a.recv, first * count, blocks * count);
    const steps: PromiseLike<unknown>[] = [];
    if (!a.inPlace) steps.push(Promise.resolve(a.dev.copy(block(a.rank, 1), a.send)));
    for (let mask = 1; mask < a.nranks; mask <<= 1) {
      const s = a.rank & ~(mask - 1);
      const r = s ^ mask;
      const peer = a.rank ^ mask;
      const o = { dtype: a.dtype };
      // Ops run in issue order and block on their match: the lower rank sends first.
      if (a.rank < peer) steps.push(a.comm.send(block(s, mask), peer, o), a.comm.recv(block(r, mask), peer, o));
      else steps.push(a.comm.recv(block(r, mask), peer, o), a.comm.send(block(s, mask), peer, o));
    }
    return Promise.all(steps);
  },
};
