/**
 * A flood of unauthenticated connections must not flood the log: the store logs the
 * first few refusals of each period one per line and then one summary line per
 * address, whose counts add up to every refusal.
 */
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';

import { encodeRequest, Op } from '../../src/rendezvous/protocol.js';
import { StoreServer } from '../../src/rendezvous/server.js';
import { sleep } from './helpers.js';

const servers: StoreServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) await s.close();
});

/** Opens `n` connections (`parallel` at a time) that each send a bad first request and wait to be closed. */
async function flood(port: number, n: number, parallel = 50): Promise<void> {
  const one = (i: number): Promise<void> =>
    new Promise((resolve) => {
      const socket = net.connect({ host: '127.0.0.1', port });
      socket.on('error', () => {});
      socket.on('data', () => {});
      socket.on('close', () => resolve());
      socket.on('connect', () => {
        // Half with a wrong token, half with a request that is not AUTH.
        socket.write(i % 2 === 0
          ? encodeRequest({ op: Op.Auth, token: Buffer.from('guess'), clientName: `bot${i}` })
          : encodeRequest({ op: Op.Set, key: 'k', value: Buffer.from('v') }));
      });
    });
  for (let i = 0; i < n; i += parallel) {
    await Promise.all(Array.from({ length: Math.min(parallel, n - i) }, (_, j) => one(i + j)));
  }
}

/** Refusals a log accounts for: one per single line, N per "refused N ..." summary. */
function accounted(logs: string[]): number {
  let total = 0;
  for (const line of logs) {
    const m = /^refused (\d+) more unauthenticated connections? from 127\.0\.0\.1 in the last [\d.]+ s/.exec(line);
    if (m) total += Number(m[1]);
    else if (/^refused connection from 127\.0\.0\.1:\d+/.test(line)) total += 1;
    else throw new Error(`unexpected log line: ${line}`);
  }
  return total;
}

describe('store refusal log', () => {
  it('summarises a flood of bad connections in a bounded number of lines', async () => {
    const logs: string[] = [];
    const server = await StoreServer.start({ host: '127.0.0.1', port: 0, token: 'secret', log: (m) => logs.push(m) });
    servers.push(server);
    await flood(server.port, 400);
    await server.close(); // flushes the pending summary
    expect(logs.length).toBeLessThanOrEqual(6);
    expect(accounted(logs)).toBe(400);
    expect(logs.some((l) => /^refused \d+ more unauthenticated connections from 127\.0\.0\.1 in the last/.test(l))).toBe(true);
  });

  it('writes a summary per period while a flood goes on', async () => {
    const logs: string[] = [];
    const server = await StoreServer.start({ host: '127.0.0.1', port: 0, token: 'secret', log: (m) => logs.push(m), refusalLogPeriodMs: 300 });
    servers.push(server);
    await flood(server.port, 200);
    await sleep(400);
    const during = logs.length;
    expect(during).toBeGreaterThanOrEqual(2);
    await flood(server.port, 200);
    await sleep(400);
    expect(logs.length).toBeLessThanOrEqual(2 * 6);
    expect(accounted(logs)).toBe(400);
    // Everything was summarised already: close() has nothing left to report.
    const before = logs.length;
    await server.close();
    expect(logs.length).toBe(before);
  });
});
