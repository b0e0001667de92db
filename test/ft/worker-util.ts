/** What the elastic-training worker processes share (test/ft/worker.ts, test/launch/fixtures/ft-elastic.mts). */
import type { ElasticGroup } from '../../src/ft/group.js';

/** Waits until a joiner registered with the group, so it grows at exactly the next step boundary. */
export async function waitForJoiner(group: ElasticGroup, who: string, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while ((await group.pendingJoiners()) < 1) {
    if (Date.now() > deadline) throw new Error(`${who} did not register within ${ms / 1000} s`);
    await new Promise((res) => setTimeout(res, 10));
  }
}
