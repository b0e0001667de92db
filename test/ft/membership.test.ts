/**
 * The membership round against a real store server in this process: who is in, in
 * which order, and that a process checking in after the window is refused (ERR_TIMEOUT)
 * while the others agree on the same list. Expectations are computed from the rules:
 * previous ranks in order, then joiners by arrival; the window bounds the wait.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreServer } from '../../src/rendezvous/server.js';
import { StoreClient } from '../../src/rendezvous/client.js';
import { genKey, membershipRound } from '../../src/ft/membership.js';

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

  it('stops waiting for members reported gone; one reported by mistake is in if it checks in before the close, late after it', async () => {
    const [a, b, c, d, e, f] = await Promise.all([client(), client(), client(), client(), client(), client()]);
    const o = { expected: 3, windowMs: 3000 };
    // b reports previous rank 2 gone: a and b make up 3 with it, the round closes at once.
    const t0 = performance.now();
    const rs = await Promise.all([
      membershipRound(a, 9, { id: 'a', prevRank: 0, step: 4 }, o),
      membershipRound(b, 9, { id: 'b', prevRank: 1, step: 4, lost: [2] }, o),
    ]);
    expect(performance.now() - t0).toBeLessThan(o.windowMs / 3);
    for (const r of rs) expect(r.members.map((m) => [m.id, m.rank])).toEqual([['a', 0], ['b', 1]]);
    // The member reported gone was slow, not gone: it is refused, the list stands.
    await expect(membershipRound(c, 9, { id: 'c', prevRank: 2, step: 4 }, o)).rejects.toMatchObject({ code: 'ERR_TIMEOUT', details: { late: true } });

    // d says e (previous rank 1) is gone, but e checks in: it is counted once, so the
    // round still waits for f (previous rank 2) and closes when it comes.
    const t1 = performance.now();
    const later = (ms: number) => new Promise((r) => setTimeout(r, ms));
    const rs2 = await Promise.all([
      membershipRound(d, 10, { id: 'd', prevRank: 0, step: 4, lost: [1] }, o),
      later(50).then(() => membershipRound(e, 10, { id: 'e', prevRank: 1, step: 4 }, o)),
      later(300).then(() => membershipRound(f, 10, { id: 'f', prevRank: 2, step: 4 }, o)),
    ]);
    const waited = performance.now() - t1;
    expect(waited).toBeGreaterThanOrEqual(290);
    expect(waited).toBeLessThan(o.windowMs / 2);
    for (const r of rs2) expect(r.members.map((m) => m.id)).toEqual(['d', 'e', 'f']);
  });

  it('does not count a member reported gone twice while its check-in is under way (ticket taken, record not yet written)', async () => {
    const [a, b, raw] = await Promise.all([client(), client(), client()]);
    const o = { expected: 3, windowMs: 3000 };
    const later = (ms: number) => new Promise((r) => setTimeout(r, ms));
    const t0 = performance.now();
    const closing = membershipRound(a, 13, { id: 'a', prevRank: 0, step: 1, lost: [2] }, o);
    // Previous rank 2, reported gone, is alive: it takes ticket 2 now and writes its record 100 ms later.
    await later(20);
    expect(Number(await raw.add(genKey(13, 'seq'), 1))).toBe(2);
    const members = Promise.all([
      later(100).then(() => raw.set(genKey(13, 'member/2'), JSON.stringify({ id: 'c', prevRank: 2, step: 1 }))),
      later(300).then(() => membershipRound(b, 13, { id: 'b', prevRank: 1, step: 1 }, o)),
    ]);
    const r = await closing;
    await members;
    expect(performance.now() - t0).toBeGreaterThanOrEqual(290);
    expect(r.members.map((m) => m.id)).toEqual(['a', 'b', 'c']);
  });

  it("takes the closer's own probe into account, and admits spares at once for members known gone", async () => {
    const [a, b, s] = await Promise.all([client(), client(), client()]);
    let probes = 0;
    const t0 = performance.now();
    // The closer learns 150 ms in that previous rank 1 is gone (a launcher's record arriving late).
    const r = await membershipRound(a, 11, { id: 'a', prevRank: 0, step: 2 }, {
      expected: 2, windowMs: 3000,
      probeLost: async () => (probes++, performance.now() - t0 > 150 ? [1] : []),
    });
    const waited = performance.now() - t0;
    expect(waited).toBeGreaterThanOrEqual(140);
    expect(waited).toBeLessThan(1000);
    expect(probes).toBeGreaterThan(1);
    expect(r.members.map((m) => m.id)).toEqual(['a']);

    // Short by one known gone: onShort is asked at once and its spare checks in.
    let missing = -1;
    const t1 = performance.now();
    const rs = await Promise.all([
      membershipRound(b, 12, { id: 'b', prevRank: 0, step: 2, lost: [1] }, {
        expected: 2, windowMs: 3000,
        onShort: async (m) => {
          missing = m;
          void membershipRound(s, 12, { id: 'spare', prevRank: -1, step: -1 }, { expected: 2, windowMs: 3000 });
          return 1;
        },
      }),
    ]);
    expect(performance.now() - t1).toBeLessThan(1000);
    expect(missing).toBe(1);
    expect(rs[0]!.members.map((m) => [m.id, m.rank])).toEqual([['b', 0], ['spare', 1]]);
  });
});
