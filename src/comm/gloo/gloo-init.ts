/** The Gloo half of init(): the CPU communicator over TCP (used by src/comm/init.ts). */
import type { Binding, NativeComm } from '../../native.js';
import { loadGlooTuning } from './tuning.js';

export interface GlooInit {
  rank: number;
  worldSize: number;
  storeHost: string;
  storePort: number;
  token: string;
  timeoutMs: number;
  /** Network interface to listen on; else NCCL_NODE_SOCKET_IFNAME / GLOO_SOCKET_IFNAME, else `localAddress`. */
  iface?: string | undefined;
  /** The address this host used to reach the store (undefined when unknown). */
  localAddress: string | undefined;
  /** Check on every collective that all ranks made the same call. */
  checkAgreement: boolean;
}

/** Joins the world communicator on Gloo; peers find each other through the store. */
export function createGlooComm(native: Binding, j: GlooInit): Promise<NativeComm> {
  const iface = j.iface ?? process.env.NCCL_NODE_SOCKET_IFNAME ?? process.env.GLOO_SOCKET_IFNAME;
  return native.createGloo({
    rank: j.rank,
    size: j.worldSize,
    storeHost: j.storeHost,
    storePort: j.storePort,
    token: j.token,
    prefix: 'nccl-node/gloo/world/',
    // The address this host used to reach the store is one its peers can reach.
    ...(iface ? { iface } : { hostname: j.localAddress ?? '127.0.0.1' }),
    timeoutMs: j.timeoutMs,
    checkAgreement: j.checkAgreement,
    tuning: loadGlooTuning(),
  });
}
