// Runs the C++ StoreClient (native/core/store_client.cpp) against the TypeScript
// server through a small driver program built here with g++.
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { StoreServer } from '../../src/rendezvous/server.js';
import { freePort, sleep } from './helpers.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const hasGxx = spawnSync('g++', ['--version'], { stdio: 'ignore' }).status === 0;
if (!hasGxx) console.warn('native-client.test.ts: skipped because g++ is not installed');

const TOKEN = 'native-token';
let dir = '';
let driver = '';
const servers: StoreServer[] = [];

interface Step {
  ok: boolean;
  /** The result when ok, else the error message. */
  text: string;
  code?: string;
  ms?: number;
}

/** Runs the driver asynchronously: the server lives in this process and must keep serving. */
async function run(port: number, scenario: string, token = TOKEN): Promise<Map<string, Step>> {
  const { stdout } = await promisify(execFile)(driver, ['127.0.0.1', String(port), token, scenario], { timeout: 15_000 });
  const steps = new Map<string, Step>();
  for (const line of stdout.trim().split('\n')) {
    const ok = /^(\S+) ok (.*)$/.exec(line);
    const err = /^(\S+) err (\S+) (\d+) (.*)$/.exec(line);
    if (ok) steps.set(ok[1]!, { ok: true, text: ok[2]! });
    else if (err) steps.set(err[1]!, { ok: false, code: err[2]!, ms: Number(err[3]), text: err[4]! });
    else throw new Error(`unexpected driver output: ${line}`);
  }
  return steps;
}

function step(steps: Map<string, Step>, name: string): Step {
  const s = steps.get(name);
  if (!s) throw new Error(`driver printed no "${name}" step; got ${JSON.stringify([...steps])}`);
  return s;
}

async function startServer(port = 0, logs: string[] = []): Promise<StoreServer> {
  const server = await StoreServer.start({ host: '127.0.0.1', port, token: TOKEN, log: (m) => logs.push(m) });
  servers.push(server);
  return server;
}

describe.skipIf(!hasGxx)('native StoreClient against the TypeScript server (needs g++)', () => {
  beforeAll(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'nccl-node-store-native-'));
    driver = path.join(dir, 'store_client_driver');
    // -Werror: the native sources must stay warning-free.
    execFileSync('g++', [
      '-std=c++17', '-Wall', '-Wextra', '-Werror', '-O1', '-pthread',
      path.join(root, 'test/rendezvous/store_client_driver.cpp'),
      path.join(root, 'native/core/store_client.cpp'),
      path.join(root, 'native/core/errors.cpp'),
      '-o', driver,
    ], { stdio: 'pipe', timeout: 120_000 });
  }, 130_000);

  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => s.close()));
  });

  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('sets, gets, adds, checks, waits, times out and removes', async () => {
    const server = await startServer();
    server.set('ts/hello', 'from ts');
    server.onSet((key) => {
      // Set "late" only after the driver announced it is about to block on it.
      if (key === 'driver/ready') setTimeout(() => server.set('late', 'late value'), 150);
    });
    const steps = await run(server.port, 'basic');
    const ep = `127.0.0.1:${server.port}`;

    expect(step(steps, 'set')).toEqual({ ok: true, text: 'done' });
    expect(new TextDecoder().decode(server.get('cpp/counter'))).toBe('3'); // decimal text, as ADD stores it
    expect(step(steps, 'get-ts')).toEqual({ ok: true, text: 'from ts' });
    expect(step(steps, 'add')).toEqual({ ok: true, text: '3' });
    expect(step(steps, 'check')).toEqual({ ok: true, text: '10' });
    expect(step(steps, 'wait')).toEqual({ ok: true, text: 'done' });

    const waitTimeout = step(steps, 'wait-timeout');
    expect(waitTimeout).toMatchObject({ ok: false, code: 'ERR_TIMEOUT' });
    expect(waitTimeout.text).toBe(`store at ${ep}: WAIT "cpp/hello", "never/a": timed out after 200 ms waiting for key(s) "never/a"`);
    expect(waitTimeout.ms).toBeGreaterThanOrEqual(190);
    expect(waitTimeout.ms).toBeLessThan(2000);

    const getTimeout = step(steps, 'get-timeout');
    expect(getTimeout).toMatchObject({ ok: false, code: 'ERR_TIMEOUT' });
    expect(getTimeout.text).toBe(`store at ${ep}: GET "never/b": timed out after 200 ms waiting for key(s) "never/b"`);

    expect(step(steps, 'remove')).toEqual({ ok: true, text: 'gone' });
    expect(server.has('cpp/hello')).toBe(false);
    expect(step(steps, 'threads')).toEqual({ ok: true, text: '200' });
    expect(step(steps, 'get-late')).toEqual({ ok: true, text: 'late value' });
    expect(step(steps, 'connect')).toEqual({ ok: true, text: 'done' });
  }, 20_000);

  it('is refused with ERR_UNAUTHORIZED for a wrong token, and the server logs it', async () => {
    const logs: string[] = [];
    const server = await startServer(0, logs);
    const s = step(await run(server.port, 'wrong-token', 'not-the-token'), 'connect');
    expect(s).toMatchObject({ ok: false, code: 'ERR_UNAUTHORIZED' });
    expect(s.text).toContain(`127.0.0.1:${server.port}`);
    expect(s.text).toContain('"driver-wrong"');
    expect(logs).toEqual([expect.stringMatching(/^refused connection from 127\.0\.0\.1:\d+ \(client "driver-wrong"\): wrong token$/)]);
  }, 20_000);

  it('retries the connection until the server appears', async () => {
    const port = await freePort();
    const running = run(port, 'connect-late');
    await sleep(300);
    const server = await startServer(port);
    expect(step(await running, 'connect')).toEqual({ ok: true, text: 'connected' });
    expect(server.has('late/connected')).toBe(true);
  }, 20_000);

  it('gives up with ERR_TIMEOUT when nothing listens', async () => {
    const port = await freePort();
    const s = step(await run(port, 'unreachable'), 'connect');
    expect(s).toMatchObject({ ok: false, code: 'ERR_TIMEOUT' });
    expect(s.text).toContain(`127.0.0.1:${port} within 300 ms`);
    expect(s.text).toContain('Connection refused');
    expect(s.ms).toBeGreaterThanOrEqual(290);
    expect(s.ms).toBeLessThan(2000);
  }, 20_000);

  it('does not hang when the server stops answering', async () => {
    const mute = net.createServer((sock) => {
      sock.once('data', () => sock.write(Buffer.from([1, 0, 0, 0, 0]))); // OK to AUTH, then silence
    });
    await new Promise<void>((r) => mute.listen(0, '127.0.0.1', r));
    const port = (mute.address() as net.AddressInfo).port;
    try {
      const steps = await run(port, 'mute');
      const get = step(steps, 'get');
      // The client waits the GET's own timeout plus its reply margin (5 s), no longer.
      expect(get).toMatchObject({ ok: false, code: 'ERR_TIMEOUT' });
      expect(get.text).toBe(`store at 127.0.0.1:${port}: GET "k": no reply within 5100 ms; connection closed`);
      expect(get.ms).toBeGreaterThanOrEqual(5000);
      expect(get.ms).toBeLessThan(7000);
      expect(step(steps, 'after')).toMatchObject({ ok: false, code: 'ERR_STORE' });
      expect(step(steps, 'after').text).toContain('connection is closed after an earlier error');
    } finally {
      await new Promise((r) => mute.close(r)); // the driver has exited, so its socket is gone
    }
  }, 20_000);
});
