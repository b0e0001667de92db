import { PassThrough, Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { StoreClient } from '../../src/rendezvous/client.js';
import { StoreServer } from '../../src/rendezvous/server.js';
import {
  FAILED_KEY,
  announceJoin,
  joinKey,
  parseFailure,
  publishFailure,
  watchFailure,
  watchJoins,
  type FailureRecord,
} from '../../src/launch/join.js';
import { clientView, serverView, type KeyView } from '../../src/launch/keyview.js';
import { pipePrefixed } from '../../src/launch/prefix.js';

const TOKEN = 'join-test-token';
const cleanup: Array<() => Promise<unknown>> = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

async function setup(): Promise<{ server: StoreServer; client: StoreClient; views: KeyView[] }> {
  const server = await StoreServer.start({ host: '127.0.0.1', port: 0, token: TOKEN, log: () => {} });
  cleanup.push(() => server.close());
  const opts = { host: '127.0.0.1', port: server.port, token: TOKEN, connectTimeoutMs: 5_000 };
  const client = await StoreClient.connect(opts);
  cleanup.push(() => client.close());
  const remote = await clientView(opts);
  cleanup.push(() => remote.close());
  return { server, client, views: [serverView(server), remote] };
}

const failure: FailureRecord = {
  reason: 'exit', rank: 2, pid: 42, exitCode: 3, node: 1, host: 'h', message: 'rank 2 (pid 42) exited with code 3',
};

describe('join protocol', () => {
  it('announceJoin writes the join key the launcher waits for', async () => {
    const { server, client, views } = await setup();
    for (const view of views) {
      const watch = watchJoins(view, [0, 1], 5_000);
      await announceJoin(client, { rank: 0, localRank: 0 });
      await announceJoin(client, { rank: 1, localRank: 1, host: 'x', pid: 7 });
      await expect(watch).resolves.toEqual([]);
    }
    expect(JSON.parse(new TextDecoder().decode(server.get(joinKey(1))))).toEqual({ pid: 7, host: 'x', localRank: 1 });
  });

  it('names the ranks that did not join in time', async () => {
    const { client, views } = await setup();
    await announceJoin(client, { rank: 1, localRank: 1 });
    for (const view of views) await expect(watchJoins(view, [0, 1, 2], 200)).resolves.toEqual([0, 2]);
  });

  it('stops watching on abort', async () => {
    const { views } = await setup();
    for (const view of views) {
      const ac = new AbortController();
      const watch = watchJoins(view, [0], 60_000, ac.signal);
      ac.abort();
      await expect(watch).rejects.toThrow();
    }
  });

  it('publishes the first failure only, and every watcher sees it', async () => {
    const { views } = await setup();
    const [local, remote] = views as [KeyView, KeyView];
    const seen = [watchFailure(local), watchFailure(remote)];
    expect(await publishFailure(remote, failure)).toBe(true);
    expect(await publishFailure(local, { ...failure, rank: 0 })).toBe(false);
    expect(await Promise.all(seen)).toEqual([failure, failure]);
  });

  it('tolerates a failure value it cannot parse', () => {
    expect(parseFailure('boom')).toMatchObject({ reason: 'error', exitCode: 1, message: 'a failure was reported: boom' });
    expect(FAILED_KEY).toBe('nccl-node/failed');
  });
});

describe('pipePrefixed', () => {
  it('prefixes whole lines, holds partial ones and ends the last', async () => {
    const src = new PassThrough();
    const chunks: string[] = [];
    const out = new Writable({ write(c: Buffer, _e, cb) { chunks.push(c.toString()); cb(); } });
    const done = pipePrefixed(src, out, '[3] ');
    src.write('a\nb');
    src.write('c\n\nd');
    await new Promise((r) => setImmediate(r));
    expect(chunks.join('')).toBe('[3] a\n[3] bc\n[3] \n');
    src.end();
    await done;
    expect(chunks.join('')).toBe('[3] a\n[3] bc\n[3] \n[3] d\n');
  });
});
