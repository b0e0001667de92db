// One rank of test/comm/callpath.test.ts: all-reduces of every size path (the mesh
// round, Gloo's ring) issued back to back, then awaited together, next to the same
// calls awaited one by one. Rank r's buffer i holds r + i + j/7 at element j, so
// every sum is computed here for every rank. Reports the settlement order and
// every value that differs from its sum.
import { init } from '../../src/index.js';
import { report } from '../helpers/ranks.js';

const comm = await init({ backend: 'gloo' });
const n = comm.size;
const lengths = [1, 16, 4096, 32 * 1024, 128 * 1024, 16, 64 * 1024, 1];
const fill = (len: number, i: number, r: number) => Float64Array.from({ length: len }, (_, j) => r + i + (j % 64) / 8);
const sumOf = (len: number, i: number) => Float64Array.from({ length: len }, (_, j) => (n * (n - 1)) / 2 + n * (i + (j % 64) / 8));
const wrong: string[] = [];
const order: number[] = [];

for (let round = 0; round < 3; round++) {
  const bufs = lengths.map((len, i) => fill(len, i + round, comm.rank));
  const works = bufs.map((b) => comm.allReduce(b));
  works.forEach((w, i) => void w.then(() => order.push(round * lengths.length + i)));
  await Promise.all(works);
  bufs.forEach((b, i) => {
    const want = sumOf(b.length, i + round);
    const bad = b.findIndex((v, j) => v !== want[j]);
    if (bad >= 0) wrong.push(`round ${round} buffer ${i} (${b.length}) [${bad}]: ${b[bad]} != ${want[bad]}`);
  });
}
for (const [i, len] of lengths.entries()) {
  const b = fill(len, i, comm.rank);
  await comm.allReduce(b);
  const want = sumOf(len, i);
  if (b.some((v, j) => v !== want[j])) wrong.push(`awaited buffer ${i} (${len})`);
}
report({ rank: comm.rank, wrong, order });
await comm.destroy();
