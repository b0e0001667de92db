/**
 * A first job: every rank contributes a vector, all-reduces it, and prints what it
 * sent, what came back and what it expected. Run with
 *
 *   npx nccl-node run --nproc-per-node 4 examples/allreduce-demo.ts
 */
import { init } from 'nccl-node';

const comm = await init();
const { rank, size } = comm;

// Rank r sends [r+1, 2(r+1), 3(r+1), 4(r+1)]; the sum over ranks is k * size(size+1)/2.
const grads = Float32Array.from([1, 2, 3, 4], (k) => k * (rank + 1));
const sent = Array.from(grads);
const t0 = performance.now();
await comm.allReduce(grads, { op: 'sum' });
const ms = performance.now() - t0;
const expected = sent.map((_, i) => (i + 1) * ((size * (size + 1)) / 2));
const ok = expected.every((v, i) => grads[i] === v);
console.log(
  `rank ${rank}/${size} (${comm.backend}): sent [${sent.join(', ')}] -> sum [${Array.from(grads).join(', ')}] ` +
    `in ${ms.toFixed(2)} ms, ${ok ? 'as expected' : `EXPECTED [${expected.join(', ')}]`}`,
);

// The average of a larger buffer, and a barrier so the lines come out together.
const big = new Float32Array(1 << 20).fill(rank);
await comm.allReduce(big, { op: 'avg' });
await comm.barrier();
if (rank === 0) console.log(`avg over ${size} ranks of 1M floats: ${big[0]} (expected ${(size - 1) / 2})`);
await comm.destroy();
if (!ok || big[0] !== (size - 1) / 2) process.exit(1);
