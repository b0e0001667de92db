/**
 * Rank script for an abort on the shared-memory path, 3 ranks. Each trial splits a
 * fresh communicator off the world; rank 1 calls a small all-reduce late, so ranks 0
 * and 2 are both waiting for it; rank 0 aborts the communicator as soon as its call
 * returned. Ranks 1 and 2 report whether their call completed (every rank's part had
 * been delivered), then, once rank 0's abort is known done (a world barrier), call
 * again and report the code and how long the failure took.
 */
import { init } from '../../src/index.js';
import { binding } from '../../src/native.js';
import { readPayload, report } from '../helpers/ranks.js';

const { trials, lateMs } = readPayload<{ trials: number; lateMs: number }>();
const world = await init({ timeoutMs: 20_000 });
const me = world.rank;
const codeOf = (e: unknown): string => String((e as { code?: string }).code ?? e);

for (let t = 0; t < trials; t++) {
  const child = (await world.split({ color: 0 }))!;
  if (me === 1) await new Promise((r) => setTimeout(r, lateMs));
  const x = new Float64Array([me + 1, t]);
  let first: { ok: boolean; code?: string };
  try {
    await child.allReduce(x, { op: 'sum' });
    first = { ok: x[0] === 6 && x[1] === 3 * t };
  } catch (e) {
    first = { ok: false, code: codeOf(e) };
  }
  if (me === 0) child.abort();
  await world.barrier();
  let next: { ok: boolean; code?: string; ms?: number } | undefined;
  if (me !== 0) {
    const t0 = performance.now();
    try {
      await child.allReduce(new Float64Array(2));
      next = { ok: true };
    } catch (e) {
      next = { ok: false, code: codeOf(e), ms: performance.now() - t0 };
    }
    child.abort();
  }
  report({ trial: t, first, next });
}
report({ stats: binding().glooShmStats() });
await world.destroy();
