/**
 * On-demand rounds (the etcd rendezvous) over an in-memory RoundBackend: a coordinator
 * that takes over mid-job carries on from the keys alone (pending arrivals in order,
 * the last formed attempt and its members from the tickets). Expectations are computed
 * from the scenario: node ranks in join order, the next attempt number, spares.
 */
import { describe, expect, it } from 'vitest';

import { Coordinator, type Arrival, type RoundBackend, type Ticket } from '../../src/launch/rounds.js';

function memoryBackend(): RoundBackend & { keys: Map<string, string>; gone: Set<string> } {
  const keys = new Map<string, string>();
  const gone = new Set<string>();
  const listeners = new Set<(k: string, v: Uint8Array) => void>();
  return {
    keys,
    gone,
    onSet: (l) => {
      for (const [k, v] of keys) l(k, Buffer.from(v));
      listeners.add(l);
      return () => listeners.delete(l);
    },
    set: (k, v) => {
      keys.set(k, v);
      for (const l of [...listeners]) l(k, Buffer.from(v));
    },
    has: (k) => keys.has(k),
    alive: (m) => !gone.has(m.id),
  };
}

const arrival = (id: string, attempt: number): Arrival => ({ id, clientName: id, host: `host-${id}`, nproc: 2, attempt });

function coordinator(backend: RoundBackend, selfId: string): Coordinator {
  return new Coordinator(backend, { minNodes: 1, maxNodes: 2, static: false, lastCallMs: 60_000, joinTimeoutMs: 5_000, selfId, log: () => {}, onDemand: true });
}

const ticket = (b: ReturnType<typeof memoryBackend>, id: string, n: number): Ticket | undefined => {
  const t = b.keys.get(`nccl-node/rdzv/ticket/${id}/${n}`);
  return t === undefined ? undefined : (JSON.parse(t) as Ticket);
};

describe('on-demand rounds', () => {
  it('a coordinator taking over opens the attempt after the last formed one, with the survivors and a spare', () => {
    const b = memoryBackend();
    const first = coordinator(b, 'a');
    b.set('nccl-node/rdzv/arrive/a/0', JSON.stringify(arrival('a', 0)));
    b.set('nccl-node/rdzv/arrive/b/0', JSON.stringify(arrival('b', 0)));
    // MAX came: attempt 0 forms at once, node ranks in join order.
    expect([ticket(b, 'a', 0)?.nodeRank, ticket(b, 'b', 0)?.nodeRank, ticket(b, 'a', 0)?.attempt, ticket(b, 'a', 0)?.worldSize]).toEqual([0, 1, 0, 4]);
    // A spare asking for attempt 0 while it runs gets nothing.
    b.set('nccl-node/rdzv/arrive/c/0', JSON.stringify(arrival('c', 0)));
    expect(ticket(b, 'c', 0)).toBeUndefined();
    // Node a (the coordinator) is lost; b comes back asking for attempt 1; b's coordinator takes over.
    first.stop();
    b.gone.add('a');
    b.set('nccl-node/rdzv/arrive/b/1', JSON.stringify(arrival('b', 1)));
    const second = coordinator(b, 'b');
    const t = ticket(b, 'b', 1);
    second.stop();
    expect(t).toMatchObject({ attempt: 1, nodeRank: 0, nnodes: 2, worldSize: 4 });
    expect(ticket(b, 'c', 0)).toMatchObject({ attempt: 1, nodeRank: 1 });
    expect(t?.members.map((m) => m.id)).toEqual(['b', 'c']);
  });

  it('the first arrival opens attempt 0 (no attempt named counts as 0); MAX forms it; a later arrival for 0 is a spare', () => {
    const b = memoryBackend();
    const c = coordinator(b, 'a');
    b.set('nccl-node/rdzv/arrive/x/0', JSON.stringify({ ...arrival('x', 0), attempt: undefined }));
    b.set('nccl-node/rdzv/arrive/y/0', JSON.stringify(arrival('y', 0)));
    expect([ticket(b, 'x', 0)?.attempt, ticket(b, 'y', 0)?.attempt]).toEqual([0, 0]);
    b.set('nccl-node/rdzv/arrive/z/0', JSON.stringify(arrival('z', 0)));
    expect(ticket(b, 'z', 0)).toBeUndefined();
    c.stop();
  });
});
