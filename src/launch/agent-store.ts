/**
 * Rendezvous under torchrun. torchrun's agent already listens on MASTER_ADDR:MASTER_PORT
 * with its own TCPStore and tells its workers to share it (TORCHELASTIC_USE_AGENT_STORE=True),
 * so rank 0 cannot host the job's store there. Instead rank 0 hosts it on a free port
 * with a fresh token and publishes host, port and token in the agent's store under a
 * key of this run and restart; every rank reads them from there. Only that one key goes
 * through torch's store: the native Gloo and NCCL code keeps speaking the job store's
 * own authenticated protocol.
 */
import { randomBytes } from 'node:crypto';
import { z } from 'zod';

import { NcclNodeError } from '../errors.js';
import { StoreThread, type HostedStore } from '../rendezvous/store-thread.js';
import { TcpStoreClient } from '../rendezvous/tcpstore.js';
import type { JobEnv } from './env.js';

export interface AgentStoreJob {
  /** TORCHELASTIC_RUN_ID. */
  runId: string;
  /** TORCHELASTIC_RESTART_COUNT: a restarted attempt gets a store of its own. */
  restartCount: number;
}

export interface JobStoreAddress {
  host: string;
  port: number;
  token: string;
  /** Set on rank 0, which hosts the store (on a thread of its own: store-thread.ts). */
  server?: HostedStore;
}

/** The token is left out when the ranks share NCCL_NODE_TOKEN: torch's store has no authentication. */
const AddressSchema = z.object({ host: z.string().min(1), port: z.number().int().min(1).max(65535), token: z.string().min(1).optional() });

/** Where rank 0 publishes the job store's address in the agent's store. */
export function agentStoreKey(agent: AgentStoreJob): string {
  return `nccl-node/${agent.runId}/attempt_${agent.restartCount}/store`;
}

function isLoopback(addr: string): boolean {
  return addr === '::1' || addr.startsWith('127.');
}

/**
 * Hosts (rank 0) or finds (other ranks) the job's store through torchrun's agent store.
 * `token` is NCCL_NODE_TOKEN when set (every rank has it); otherwise rank 0 makes one.
 */
export async function jobStoreViaAgent(job: JobEnv, agent: AgentStoreJob, token: string | undefined, timeoutMs: number): Promise<JobStoreAddress> {
  const key = agentStoreKey(agent);
  const client = await TcpStoreClient.connect({ host: job.masterAddr, port: job.masterPort, connectTimeoutMs: timeoutMs });
  try {
    if (job.rank === 0) {
      // The address this host used to reach the agent's store is one the other nodes can reach.
      const local = (client.localAddress ?? '127.0.0.1').replace(/^::ffff:/, '');
      const host = local;
      const listen = isLoopback(local) ? local : local.includes(':') ? '::' : '0.0.0.0';
      const mine = token ?? randomBytes(32).toString('hex');
      const server = await StoreThread.start({ host: listen, port: 0, token: mine });
      try {
        await client.set(key, JSON.stringify({ host, port: server.port, ...(token === undefined ? { token: mine } : {}) }));
        // A reply proves the SET (which has none) arrived before we let go of the connection.
        await client.check([key]);
      } catch (err) {
        await server.close();
        throw err;
      }
      return { host, port: server.port, token: mine, server };
    }
    const raw = await client.get(key, timeoutMs).catch((err: unknown) => {
      if (err instanceof NcclNodeError && err.code === 'ERR_TIMEOUT') {
        throw new NcclNodeError('ERR_TIMEOUT',
          `rank ${job.rank}: rank 0 did not publish the job's store in torchrun's store at ${job.masterAddr}:${job.masterPort} (key "${key}") within ${timeoutMs} ms`,
          { key });
      }
      throw err;
    });
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw.toString('utf8'));
    } catch {
      // Reported below.
    }
    const address = AddressSchema.safeParse(parsed);
    if (!address.success) {
      throw new NcclNodeError('ERR_STORE', `key "${key}" in torchrun's store holds ${JSON.stringify(raw.toString('utf8').slice(0, 100))}, not a store address`, { key });
    }
    const shared = address.data.token ?? token;
    if (shared === undefined) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `rank ${job.rank}: rank 0 uses NCCL_NODE_TOKEN for the job's store, but it is not set here`, { variable: 'NCCL_NODE_TOKEN' });
    }
    return { host: address.data.host, port: address.data.port, token: shared };
  } finally {
    client.close();
  }
}
