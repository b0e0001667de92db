import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { afterEach, describe, expect, it } from 'vitest';

import { NcclNodeError } from '../../src/errors.js';
import { StoreClient } from '../../src/rendezvous/client.js';
import {
  FrameWriter,
  MAX_BODY_BYTES,
  MAX_PREAUTH_BODY_BYTES,
  Op,
  Status,
  encodeRequest,
} from '../../src/rendezvous/protocol.js';
import { StoreServer } from '../../src/rendezvous/server.js';
import { freePort, rawExchange, sleep } from './helpers.js';

const TOKEN = 'test-token-123';
const cleanups: Array<() => Promise<unknown>> = [];

afterEach(async () => {
  for (const fn of cleanups.splice(0).reverse()) await fn();
});

async function startServer(port = 0): Promise<{ server: StoreServer; logs: string[] }> {
  const logs: string[] = [];
  const server = await StoreServer.start({ host: '127.0.0.1', port, token: TOKEN, log: (m) => logs.push(m) });
  cleanups.push(() => server.close());
  return { server, logs };
}

async function connect(server: StoreServer, extra: { token?: string; clientName?: string; requestTimeoutMs?: number } = {}): Promise<StoreClient> {
  const client = await StoreClient.connect({
    host: '127.0.0.1',
    port: server.port,
    token: extra.token ?? TOKEN,
    clientName: extra.clientName ?? 'test-client',
    connectTimeoutMs: 2000,
    requestTimeoutMs: extra.requestTimeoutMs ?? 2000,
  });
  cleanups.push(() => client.close());
  return client;
}

/** Resolves to the rejection of `p`, failing the test if `p` resolves. */
async function rejection(p: Promise<unknown>): Promise<NcclNodeError> {
  const err = await p.then(
    (v) => { throw new Error(`expected a rejection, got ${String(v)}`); },
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(NcclNodeError);
  return err as NcclNodeError;
}

const authFrame = (token = TOKEN): Buffer => encodeRequest({ op: Op.Auth, token: Buffer.from(token), clientName: 'raw' });

describe('StoreServer + StoreClient', () => {
  it('reports the local address it reaches the store from (what Gloo listens on)', async () => {
    const { server } = await startServer();
    const c = await connect(server);
    expect(c.localAddress).toBe('127.0.0.1');
  });

  it('sets, gets, checks, adds and deletes', async () => {
    const { server } = await startServer();
    const c = await connect(server);
    await c.set('bytes', new Uint8Array([0, 1, 255]));
    await c.set('text', 'héllo');
    expect(await c.get('bytes', { timeoutMs: 500 })).toEqual(new Uint8Array([0, 1, 255]));
    expect(await c.getString('text', { timeoutMs: 500 })).toBe('héllo');
    expect(await c.check('text')).toBe(true);
    expect(await c.check('absent')).toBe(false);
    expect(await c.add('n', 5)).toBe(5n);
    expect(await c.add('n', -7n)).toBe(-2n);
    expect(new TextDecoder().decode(server.get('n'))).toBe('-2'); // stored as decimal text
    expect(await c.delete('text')).toBe(true);
    expect(await c.delete('text')).toBe(false);
    expect(await c.check('text')).toBe(false);
    await c.ping();
  });

  it('releases a blocking get when another client sets the key', async () => {
    const { server } = await startServer();
    const [a, b] = [await connect(server), await connect(server)];
    let settled = false;
    const got = a.getString('later', { timeoutMs: 3000 }).finally(() => (settled = true));
    await sleep(100);
    expect(settled).toBe(false);
    await b.set('later', 'value');
    expect(await got).toBe('value');
  });

  it('times out a wait and names only the missing key', async () => {
    const { server } = await startServer();
    const c = await connect(server);
    await c.set('present', '1');
    const start = Date.now();
    const err = await rejection(c.wait(['present', 'missing'], { timeoutMs: 150 }));
    expect(Date.now() - start).toBeGreaterThanOrEqual(140);
    expect(err.code).toBe('ERR_TIMEOUT');
    expect(err.message).toMatch(/timed out after 150 ms waiting for key\(s\) "missing"$/);
    expect(err.message).toContain(`127.0.0.1:${server.port}`);
    // The connection stays usable after a server-side timeout.
    await c.ping();
  });

  it('times out a get naming the key', async () => {
    const { server } = await startServer();
    const c = await connect(server);
    const err = await rejection(c.get('nope', { timeoutMs: 100 }));
    expect(err.code).toBe('ERR_TIMEOUT');
    expect(err.message).toContain('GET "nope"');
    expect(err.details).toMatchObject({ key: 'nope', timeoutMs: 100 });
  });

  it('counts correctly with add from several clients at once', async () => {
    const { server } = await startServer();
    const clients = await Promise.all(Array.from({ length: 5 }, () => connect(server)));
    const results = await Promise.all(clients.flatMap((c) => Array.from({ length: 20 }, () => c.add('counter', 1))));
    // Every add saw a distinct intermediate value: no lost updates.
    expect(results.map(Number).sort((x, y) => x - y)).toEqual(Array.from({ length: 100 }, (_, i) => i + 1));
    expect(await clients[0]!.add('counter', 0)).toBe(100n);
  });

  it('answers pipelined requests in order', async () => {
    const { server } = await startServer();
    const c = await connect(server);
    // Issued without awaiting: each one must see the effect of the ones before it.
    const results = await Promise.all([
      c.set('a', '1'),
      c.add('n', 1),
      c.check('a'),
      c.add('n', 1),
      c.delete('a'),
      c.check('a'),
    ]);
    expect(results).toEqual([undefined, 1n, true, 2n, true, false]);
  });

  it('does not hold a set behind a blocking get on the same client', async () => {
    const { server } = await startServer();
    const c = await connect(server);
    const got = c.getString('p', { timeoutMs: 3000 });
    const start = Date.now();
    await c.set('p', 'go'); // would deadlock if it queued behind the GET
    expect(Date.now() - start).toBeLessThan(500);
    expect(await got).toBe('go');
    // The pooled connection is reused and still works.
    expect(await c.getString('p', { timeoutMs: 100 })).toBe('go');
  });

  it('refuses a wrong token and logs the peer and client name', async () => {
    const { server, logs } = await startServer();
    const err = await rejection(connect(server, { token: 'wrong', clientName: 'rank7@nodeB' }));
    expect(err.code).toBe('ERR_UNAUTHORIZED');
    expect(err.message).toContain(`127.0.0.1:${server.port}`);
    expect(logs).toHaveLength(1);
    expect(logs[0]).toMatch(/^refused connection from 127\.0\.0\.1:\d+ \(client "rank7@nodeB"\): wrong token$/);
  });

  it('refuses a first request that is not AUTH', async () => {
    const { server, logs } = await startServer();
    const replies = await rawExchange(server.port, [
      encodeRequest({ op: Op.Set, key: 'k', value: Buffer.from('v') }),
      authFrame(), // too late: the connection is already refused
    ]);
    expect(replies).toEqual([Buffer.of(Status.Unauthorized)]);
    expect(server.has('k')).toBe(false);
    expect(logs.join('\n')).toMatch(/refused connection from 127\.0\.0\.1:\d+: first request was SET, not AUTH/);
  });

  it('releases parked waiters with an error on close()', async () => {
    const { server } = await startServer();
    const c = await connect(server);
    const get = rejection(c.get('never', { timeoutMs: 5000 }));
    const wait = rejection(c.wait(['never2'], { timeoutMs: 5000 }));
    await sleep(50);
    const start = Date.now();
    await server.close();
    for (const err of [await get, await wait]) {
      expect(err.code).toBe('ERR_STORE');
      expect(err.message).toContain('shutting down');
    }
    expect(Date.now() - start).toBeLessThan(1000);
    // Later calls fail fast instead of hanging.
    expect((await rejection(c.ping())).code).toBe('ERR_STORE');
  });

  it('keeps retrying the connection until the server appears', async () => {
    const port = await freePort();
    const connecting = StoreClient.connect({ host: '127.0.0.1', port, token: TOKEN, connectTimeoutMs: 5000 });
    await sleep(300);
    const { server } = await startServer(port);
    const c = await connecting;
    cleanups.push(() => c.close());
    await c.set('k', 'v');
    expect(server.has('k')).toBe(true);
  });

  it('gives up connecting after connectTimeoutMs with ERR_TIMEOUT', async () => {
    const port = await freePort();
    const start = Date.now();
    const err = await rejection(StoreClient.connect({ host: '127.0.0.1', port, token: TOKEN, connectTimeoutMs: 300 }));
    expect(err.code).toBe('ERR_TIMEOUT');
    expect(err.message).toContain(`127.0.0.1:${port}`);
    expect(err.message).toContain('ECONNREFUSED');
    expect(Date.now() - start).toBeGreaterThanOrEqual(280);
    expect(Date.now() - start).toBeLessThan(2000);
  });

  it('refuses oversized frames, before and after AUTH', async () => {
    const { server, logs } = await startServer();
    const header = (n: number): Buffer => Buffer.from(new Uint32Array([n]).buffer);
    const after = await rawExchange(server.port, [authFrame(), header(MAX_BODY_BYTES + 1)]);
    expect(after).toHaveLength(2);
    expect(after[0]).toEqual(Buffer.of(Status.Ok));
    expect(after[1]![0]).toBe(Status.BadRequest);
    expect(after[1]!.subarray(5).toString()).toContain(`${MAX_BODY_BYTES + 1} bytes`);
    // Strangers may not make the server buffer even 64 MiB.
    const before = await rawExchange(server.port, [header(MAX_PREAUTH_BODY_BYTES + 1)]);
    expect(before.map((b) => b[0])).toEqual([Status.BadRequest]);
    expect(logs).toHaveLength(2);

    // The client refuses locally rather than send what the server must refuse.
    const c = await connect(server);
    const err = await rejection(c.set('big', new Uint8Array(MAX_BODY_BYTES)));
    expect(err.code).toBe('ERR_INVALID_ARGUMENT');
    await c.ping();
  });

  it('answers a malformed request with BAD_REQUEST and keeps the connection', async () => {
    const { server } = await startServer();
    const truncatedGet = new FrameWriter().u8(Op.Get).u32(10).finish(); // says 10 key bytes, has none
    const replies = await rawExchange(server.port, [
      authFrame(),
      truncatedGet,
      encodeRequest({ op: Op.Set, key: 'k', value: Buffer.from('v') }),
      encodeRequest({ op: Op.Auth, token: Buffer.from('wrong'), clientName: 'raw' }), // ends the connection
    ]);
    expect(replies.map((b) => b[0])).toEqual([Status.Ok, Status.BadRequest, Status.Ok, Status.Unauthorized]);
    expect(replies[1]!.subarray(5).toString()).toMatch(/malformed GET request: truncated/);
    expect(server.has('k')).toBe(true);
  });

  it('rejects ADD on a non-integer value', async () => {
    const { server } = await startServer();
    const c = await connect(server);
    await c.set('word', 'abc');
    const err = await rejection(c.add('word', 1));
    expect(err.code).toBe('ERR_STORE');
    expect(err.message).toContain('not a decimal integer');
    expect(await c.getString('word', { timeoutMs: 100 })).toBe('abc');
  });

  it('gives up on a server that stops answering', async () => {
    // Accepts AUTH, then answers nothing: the client must not hang.
    const mute = net.createServer((s) => {
      s.once('data', () => s.write(Buffer.from([1, 0, 0, 0, Status.Ok])));
    });
    await new Promise<void>((r) => mute.listen(0, '127.0.0.1', r));
    cleanups.push(() => new Promise((r) => mute.close(r)));
    const port = (mute.address() as net.AddressInfo).port;
    const c = await StoreClient.connect({ host: '127.0.0.1', port, token: TOKEN, connectTimeoutMs: 1000, requestTimeoutMs: 200 });
    cleanups.push(() => c.close());
    const start = Date.now();
    const first = c.ping();
    const second = c.check('x');
    const [e1, e2] = [await rejection(first), await rejection(second)];
    expect(Date.now() - start).toBeLessThan(1000);
    expect(e1.code).toBe('ERR_TIMEOUT');
    expect(e1.message).toContain('no reply to PING within 200 ms');
    expect(e2.code).toBe('ERR_STORE');
    expect((await rejection(c.ping())).code).toBe('ERR_STORE');
  });

  it('lets a launcher in the same process watch and set keys', async () => {
    const { server } = await startServer();
    const seen: string[] = [];
    const off = server.onSet((key, value) => seen.push(`${key}=${new TextDecoder().decode(value)}`));
    const c = await connect(server);
    const waiting = c.getString('from-launcher', { timeoutMs: 2000 });
    await c.set('join/0', 'host-a');
    await c.add('count', 2);
    server.set('from-launcher', 'ok'); // wakes the remote GET
    expect(await waiting).toBe('ok');
    off();
    await c.set('join/1', 'host-b');
    expect(seen).toEqual(['join/0=host-a', 'count=2', 'from-launcher=ok']);
    expect(server.has('join/1')).toBe(true);
    expect(server.get('absent')).toBeUndefined();
  });

  it('validates arguments with ERR_INVALID_ARGUMENT', async () => {
    const { server } = await startServer();
    const c = await connect(server);
    expect((await rejection(c.get('', { timeoutMs: 10 }))).code).toBe('ERR_INVALID_ARGUMENT');
    expect((await rejection(c.get('k', { timeoutMs: -1 }))).code).toBe('ERR_INVALID_ARGUMENT');
    expect((await rejection(c.add('k', 1.5))).code).toBe('ERR_INVALID_ARGUMENT');
    expect((await rejection(c.add('k', 2n ** 63n))).code).toBe('ERR_INVALID_ARGUMENT');
    await expect(StoreServer.start({ port: 0, token: '' })).rejects.toMatchObject({ code: 'ERR_INVALID_ARGUMENT' });
  });

  it('does not keep the process alive while idle, but does while a call is pending', async () => {
    const { server } = await startServer();
    server.onSet((key) => {
      if (key === 'child/waiting') setTimeout(() => server.set('child/late', 'released'), 100);
    });
    const dir = mkdtempSync(path.join(tmpdir(), 'nccl-node-store-'));
    const script = path.join(dir, 'child.mts'); // .mts: ESM outside a package.json
    const clientUrl = new URL('../../src/rendezvous/client.ts', import.meta.url).href;
    writeFileSync(script, [
      `import { StoreClient } from ${JSON.stringify(clientUrl)};`,
      `const c = await StoreClient.connect({ host: '127.0.0.1', port: ${server.port}, token: ${JSON.stringify(TOKEN)}, connectTimeoutMs: 2000 });`,
      `await c.set('child/waiting', '1');`,
      `console.log(await c.getString('child/late', { timeoutMs: 3000 }));`,
      `// no close(): the process must still exit on its own`,
    ].join('\n'));
    const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', script], { cwd: root, timeout: 8000 });
    expect(stdout.trim()).toBe('released');
  }, 15_000);
});
