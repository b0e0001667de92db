/**
 * Store scopes, which keep a restarted attempt's ranks apart from the failed attempt's
 * keys and from the launchers' rendezvous keys. Expectations are computed: a scoped
 * client sees exactly the keys written in its scope, the launcher reads them under the
 * scope's prefix, and a token minted from another job's token is refused.
 */
import { afterEach, describe, expect, it } from 'vitest';

import { StoreClient } from '../../src/rendezvous/client.js';
import { scopeKeyPrefix, scopedToken } from '../../src/rendezvous/scope.js';
import { StoreServer } from '../../src/rendezvous/server.js';
import { prefixedView, serverView } from '../../src/launch/keyview.js';

const TOKEN = 'job-token-for-scopes';
const cleanups: Array<() => Promise<unknown>> = [];

afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

async function setup(): Promise<{ server: StoreServer; logs: string[]; connect: (token: string) => Promise<StoreClient> }> {
  const logs: string[] = [];
  const server = await StoreServer.start({ host: '127.0.0.1', port: 0, token: TOKEN, log: (m) => logs.push(m) });
  cleanups.push(() => server.close());
  const connect = async (token: string): Promise<StoreClient> => {
    const c = await StoreClient.connect({ host: '127.0.0.1', port: server.port, token, connectTimeoutMs: 2_000 });
    cleanups.push(() => c.close());
    return c;
  };
  return { server, logs, connect };
}

describe('store scopes', () => {
  it('confine a scoped client to its prefix, which the launcher reads through prefixedView', async () => {
    const { server, connect } = await setup();
    const root = await connect(TOKEN);
    const a1 = await connect(scopedToken(TOKEN, 'attempt_1'));
    const a2 = await connect(scopedToken(TOKEN, 'attempt_2'));
    await root.set('nccl-node/gloo/world/0', 'attempt 0');
    await a1.set('nccl-node/gloo/world/0', 'attempt 1');
    expect(await a2.check('nccl-node/gloo/world/0')).toBe(false);
    expect(await a1.getString('nccl-node/gloo/world/0')).toBe('attempt 1');
    expect(await root.getString('nccl-node/gloo/world/0')).toBe('attempt 0');
    expect(await a1.add('counter', 5)).toBe(5n);
    expect(await a2.add('counter', 2)).toBe(2n);
    expect(await a1.delete('nccl-node/gloo/world/0')).toBe(true);
    expect(await root.check('nccl-node/gloo/world/0')).toBe(true);
    const view = prefixedView(serverView(server), scopeKeyPrefix('attempt_2'));
    expect(await view.read('counter')).toBe('2');
    await view.write('from-launcher', 'x');
    expect(await a2.getString('from-launcher')).toBe('x');
    expect(server.has(`${scopeKeyPrefix('attempt_2')}from-launcher`)).toBe(true);
  });

  it('name the missing keys without the scope prefix when a WAIT times out', async () => {
    const { connect } = await setup();
    const a1 = await connect(scopedToken(TOKEN, 'attempt_1'));
    const err = await a1.wait(['never'], { timeoutMs: 100 }).then(() => undefined, (e: unknown) => e as { code: string; message: string });
    expect(err?.code).toBe('ERR_TIMEOUT');
    expect(err?.message).toContain('waiting for key(s) "never"');
  });

  it('refuse a token scoped from another job\'s token', async () => {
    const { connect, logs } = await setup();
    const err = await connect(scopedToken('some-other-token', 'attempt_1')).then(() => undefined, (e: unknown) => e as { code: string });
    expect(err?.code).toBe('ERR_UNAUTHORIZED');
    expect(logs.some((l) => l.includes('wrong token'))).toBe(true);
  });
});
