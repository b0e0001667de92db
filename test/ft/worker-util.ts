/** Pieces the elastic-training worker processes share (test/ft/worker.ts, test/launch/fixtures/ft-elastic.mts). */
import type { ElasticGroup } from '../../src/ft/group.js';

/** All parameters in one array, in order (what the tests compare bit for bit). */
export function flatParams(params: Float32Array[]): Float32Array {
  const flat = new Float32Array(params.reduce((a, x) => a + x.length, 0));
  let off = 0;
  for (const x of params) {
    flat.set(x, off);
    off += x.length;
  }
  return flat;
}

/** Waits until a joiner registered with the group, so it grows at exactly the next step boundary. */
export async function waitForJoiner(group: ElasticGroup, who: string, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while ((await group.pendingJoiners()) < 1) {
    if (Date.now() > deadline) throw new Error(`${who} did not register within ${ms / 1000} s`);
    await new Promise((res) => setTimeout(res, 10));
  }
}
