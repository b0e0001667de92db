/**
 * The membership round against a real store server in this process: who is in, in
 * which order, and that a process checking in after the window is refused (ERR_TIMEOUT)
 * while the others agree on the same list. Expectations are computed from the rules:
 * previous ranks in order, then joiners by arrival; the window bounds the wait.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreServer } from '../../src/rendezvous/server.js';
import { StoreClient } from '../../src/rendezvous/client.js';
import { membershipRound } from '../../src/ft/membership.js';

let server: StoreServer;
const clients: StoreClient[] = [];
const client = async () => {
  const c = await StoreClient.connect({ host: '127.0.0.1', port: server.port, token: 't' });
  clients.push(c);
  return c;
};

beforeAll(async () => {
  server = await StoreServer.start({ host: '127.0.0.1', port: 0, token: 't' });
});
afterAll(async () => {
  for (const c of clients) await c.close();
  await server.close();
});

describe('membership round', () => {
  it('orders survivors by previous rank, then joiners; a late arrival is out; the window bounds the wait', async () => {
    const [a, b, j, late] = await Promise.all([client(), client(), client(), client()]);
    const o = { expected: 4, windowMs: 300 };
    const t0 = performance.now();
    const rounds = Promise.all([
      membershipRound(a, 7, { id: 'a', prevRank: 2, step: 5 }, o),
      membershipRound(b, 7, { id: 'b', prevRank: 0, step: 5 }, o),
      membershipRound(j, 7, { id: 'j', prevRank: -1, step: -1 }, o),
    ]);
    const tooLate = new Promise((r) => setTimeout(r, 600)).then(() => membershipRound(late, 7, { id: 'late', prevRank: 1, step: 5 }, o));
    const rs = await rounds;
    const waited = performance.now() - t0;
    expect(waited).toBeGreaterThanOrEqual(290);
    expect(waited).toBeLessThan(2000);
    for (const r of rs) expect(r.members.map((m) => [m.id, m.rank])).toEqual([['b', 0], ['a', 1], ['j', 2]]);
    expect(rs.filter((r) => r.closer)).toHaveLength(1);
    await expect(tooLate).rejects.toMatchObject({ code: 'ERR_TIMEOUT', message: expect.stringMatching(/checked in after the round closed \(window 300 ms\)/) });
  });

  it('closes as soon as the expected members checked in', async () => {
    const cs = await Promise.all([client(), client()]);
    const t0 = performance.now();
    const rs = await Promise.all(cs.map((c, i) => membershipRound(c, 8, { id: `p${i}`, prevRank: i, step: 3 }, { expected: 2, windowMs: 5000 })));
    expect(performance.now() - t0).toBeLessThan(1000);
    expect(rs[1]!.members.map((m) => m.id)).toEqual(['p0', 'p1']);
  });
});
