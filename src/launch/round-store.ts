/**
 * The ranks' store of one attempt under the etcd rendezvous. Gloo, NCCL and init() keep
 * speaking the project's own store protocol, so each attempt gets a fresh embedded
 * store: node rank 0 of the round hosts it on a free port and publishes `{host, port}`
 * in etcd (`store/<attempt>`, under its lease); the other members read it there. Losing
 * that node is then an ordinary node failure: the next round has another node rank 0,
 * which hosts the next attempt's store.
 */
import dgram from 'node:dgram';
import { z } from 'zod';

import { NcclNodeError } from '../errors.js';
import { StoreServer } from '../rendezvous/server.js';
import type { EtcdRendezvous } from './etcd.js';
import { doneKey } from './join.js';
import { clientView, serverView, type KeyView } from './keyview.js';
import type { Ticket } from './rounds.js';

export interface RoundStore {
  view: KeyView;
  host: string;
  port: number;
  /** Set on the launcher hosting it. */
  server?: StoreServer;
}

const AddressSchema = z.object({ host: z.string().min(1), port: z.number().int().min(1).max(65535) });

const storeKey = (attempt: number): string => `store/${attempt}`;

/**
 * The address of this machine that packets to `host` leave from: the one other nodes
 * reach us at when they reach etcd. A connected UDP socket sends nothing.
 */
export async function addressToward(host: string, port: number): Promise<string> {
  const socket = dgram.createSocket(host.includes(':') ? 'udp6' : 'udp4');
  try {
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.connect(port, host, () => resolve());
    });
    return socket.address().address;
  } finally {
    socket.close();
  }
}

export interface RoundStoreOptions {
  etcd: EtcdRendezvous;
  ticket: Ticket;
  token: string;
  clientName: string;
  /** etcd's address: the store's host publishes the address it reaches etcd from. */
  etcdHost: string;
  etcdPort: number;
  timeoutMs: number;
  signal: AbortSignal;
  log: (msg: string) => void;
}

/** Hosts (node rank 0) or finds the attempt's store. */
export async function roundStore(o: RoundStoreOptions): Promise<RoundStore> {
  const attempt = o.ticket.attempt;
  if (o.ticket.nodeRank === 0) {
    const host = await addressToward(o.etcdHost, o.etcdPort);
    const loopback = host.startsWith('127.') || host === '::1';
    const server = await StoreServer.start({ host: loopback ? host : undefined, port: 0, token: o.token, log: o.log });
    try {
      await o.etcd.view.write(storeKey(attempt), JSON.stringify({ host, port: server.port }));
    } catch (err) {
      await server.close();
      throw err;
    }
    return { view: serverView(server), host, port: server.port, server };
  }
  try {
    await o.etcd.waitAll([storeKey(attempt)], o.timeoutMs, o.signal);
  } catch (err) {
    if (err instanceof NcclNodeError && err.code === 'ERR_TIMEOUT') {
      throw new NcclNodeError('ERR_TIMEOUT', `node 0 of attempt ${attempt} (${o.ticket.members[0]?.host}) did not publish its store in etcd within ${o.timeoutMs} ms`);
    }
    throw err;
  }
  const raw = (await o.etcd.view.read(storeKey(attempt))) ?? '';
  const address = AddressSchema.safeParse(JSON.parse(raw));
  if (!address.success) throw new NcclNodeError('ERR_STORE', `etcd key ${storeKey(attempt)} holds ${JSON.stringify(raw.slice(0, 100))}, not a store address`);
  const view = await clientView({ ...address.data, token: o.token, clientName: o.clientName, connectTimeoutMs: o.timeoutMs });
  return { view, ...address.data };
}

/**
 * Watches the leases of the other members of a running attempt: `onLost` gets the first
 * whose lease is gone before its ranks all reported a clean exit (done keys in `view`).
 */
export function watchGang(etcd: EtcdRendezvous, ticket: Ticket, selfId: string, view: KeyView, signal: AbortSignal,
  onLost: (nodeRank: number, member: Ticket['members'][number]) => void): void {
  let reported = false;
  const check = async (): Promise<void> => {
    for (const [nodeRank, m] of ticket.members.entries()) {
      if (reported || signal.aborted || m.id === selfId || etcd.alive(m.id)) continue;
      const offset = ticket.members.slice(0, nodeRank).reduce((s, x) => s + x.nproc, 0);
      const done = await Promise.all([...Array(m.nproc).keys()].map((i) => view.has(doneKey(offset + i)).catch(() => false)));
      if (done.every(Boolean) || reported || signal.aborted) continue;
      reported = true;
      onLost(nodeRank, m);
    }
  };
  const stop = etcd.subscribe((key, value) => {
    if (value === undefined && key.startsWith('alive/')) void check();
  });
  signal.addEventListener('abort', () => stop(), { once: true });
  void check();
}
