/**
 * Which launcher hosts the job's store. Static rendezvous: node 0, as always. Elastic:
 * as torchrun's c10d backend, a launcher whose machine owns the rendezvous address
 * tries to listen there, and the first to bind the port is the host; every other
 * launcher (another node, or a second launcher on the same machine) is a client.
 */
import os from 'node:os';

import { isNcclNodeError } from '../errors.js';
import { StoreServer } from '../rendezvous/server.js';
import { clientView, serverView, type KeyView } from './keyview.js';
import type { Resolved } from './options.js';

/** Whether `addr` names this machine: loopback, its host name, or one of its interfaces' addresses. */
export function isLocalAddress(addr: string): boolean {
  const a = addr.trim().toLowerCase().replace(/^\[|\]$/g, '');
  if (a === 'localhost' || a === '::1' || a.startsWith('127.') || a === os.hostname().toLowerCase()) return true;
  return Object.values(os.networkInterfaces()).some((list) => list?.some((i) => i.address.toLowerCase() === a));
}

export interface StoreAccess {
  view: KeyView;
  /** Set on the launcher that hosts the store. */
  server?: StoreServer;
  /** The port ranks connect to (the real one when 0 was asked for). */
  port: number;
}

export async function hostOrJoinStore(o: Resolved, token: string, clientName: string): Promise<StoreAccess> {
  const hosts = o.elastic ? isLocalAddress(o.masterAddr) : o.nodeRank === 0;
  if (hosts) {
    try {
      // One node: listen where ranks will connect. Several: all interfaces, as the
      // address other nodes use may not be one we can bind (NAT); the token guards it.
      const server = await StoreServer.start({
        host: o.nnodes === 1 && !o.elastic ? o.masterAddr : undefined,
        port: o.masterPort,
        token,
        log: (msg) => o.stderr.write(`nccl-node run: store: ${msg}\n`),
      });
      return { view: serverView(server), server, port: server.port };
    } catch (err) {
      // Elastic: another launcher on this machine hosts it already.
      if (!(o.elastic && isNcclNodeError(err, 'ERR_STORE') && err.details['errno'] === 'EADDRINUSE')) throw err;
    }
  }
  const view = await clientView({
    host: o.masterAddr,
    port: o.masterPort,
    token,
    clientName,
    connectTimeoutMs: o.joinTimeoutMs, // the host may come up later than us
  });
  return { view, port: o.masterPort };
}
