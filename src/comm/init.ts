/**
 * init(): joins the job's process group. Reads the rank layout from options or
 * the environment (nccl-node run, torchrun, Slurm, Open MPI), makes sure the
 * job's rendezvous store is up (rank 0 hosts it when no launcher does), announces
 * this rank to the launcher and connects the backend.
 */
import { hostname } from 'node:os';
import { NcclNodeError } from '../errors.js';
import { announceJoin } from '../launch/join.js';
import { jobStoreViaAgent } from '../launch/agent-store.js';
import { resolveJobEnv, type JobEnv } from '../launch/env.js';
import { binding } from '../native.js';
import { StoreClient } from '../rendezvous/client.js';
import { StoreServer } from '../rendezvous/server.js';
import { StoreThread, type HostedStore } from '../rendezvous/store-thread.js';
import { Communicator } from './communicator.js';
import { chooseBackend, createNcclComm } from './nccl/nccl-init.js';
import { createGlooComm } from './gloo/gloo-init.js';
import { watchTraceRequests } from './trace-signal.js';
import { initSchema, parse, type InitOptions } from './call-options.js';
import { explainFailure, releaseCommunicator, startFailureDetection, stopFailureDetection, watchCommunicator } from './heartbeat.js';

export const DEFAULT_TIMEOUT_MS = 10 * 60 * 1000;

let warnedDerivedToken = false;

function isLoopback(addr: string): boolean {
  return addr === 'localhost' || addr === '::1' || addr.startsWith('127.');
}

function envTimeout(): number | undefined {
  const raw = process.env.NCCL_NODE_TIMEOUT_MS;
  if (raw === undefined || raw === '') return undefined;
  const v = Number(raw);
  if (!Number.isInteger(v) || v < 1) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `NCCL_NODE_TIMEOUT_MS: expected a positive integer, received "${raw}"`);
  }
  return v;
}

/** The job's store: hosted here (rank 0 without a launcher, or a single process), or joined. */
export async function openStore(job: JobEnv, token: string, timeoutMs: number) {
  let server: HostedStore | undefined;
  let port = job.masterPort;
  if (job.agentStore) {
    // Under torchrun: found through the agent's TCPStore (src/launch/agent-store.ts).
    // A token given by the user is shared by every rank already; a derived one is public.
    const found = await jobStoreViaAgent(job, job.agentStore, job.tokenDerived ? undefined : token, timeoutMs);
    const client = await StoreClient.connect({ host: found.host, port: found.port, token: found.token, clientName: `rank ${job.rank}`, connectTimeoutMs: timeoutMs });
    return { server: found.server, client, host: found.host, port: found.port, token: found.token };
  }
  if (job.worldSize === 1 && !job.storeHosted) {
    // No peer to answer while this thread is busy: served from this thread.
    server = await StoreServer.start({ host: '127.0.0.1', port: 0, token });
    port = server.port;
  } else if (job.rank === 0 && !job.storeHosted) {
    // On a thread of its own: the peers' requests are answered while this rank's JS
    // thread is held (a blocking call, a long step); see store-thread.ts.
    const host = isLoopback(job.masterAddr) ? job.masterAddr : '0.0.0.0';
    server = await StoreThread.start({ host, port: job.masterPort, token });
  }
  const host = server && job.worldSize === 1 ? '127.0.0.1' : job.masterAddr;
  const client = await StoreClient.connect({
    host,
    port,
    token,
    clientName: `rank ${job.rank}`,
    connectTimeoutMs: timeoutMs,
  });
  return { server, client, host, port, token };
}

export async function init(options?: InitOptions): Promise<Communicator> {
  const o = parse(initSchema, options, 'init');
  const overrides: Partial<JobEnv> = {};
  if (o.rank !== undefined) overrides.rank = o.rank;
  if (o.worldSize !== undefined) overrides.worldSize = o.worldSize;
  if (o.localRank !== undefined) overrides.localRank = o.localRank;
  if (o.localWorldSize !== undefined) overrides.localWorldSize = o.localWorldSize;
  if (o.masterAddr !== undefined) overrides.masterAddr = o.masterAddr;
  if (o.masterPort !== undefined) overrides.masterPort = o.masterPort;
  if (o.token !== undefined) overrides.token = o.token;
  const job = resolveJobEnv(process.env, overrides);
  const timeoutMs = o.timeoutMs ?? envTimeout() ?? DEFAULT_TIMEOUT_MS;
  const token = job.token;
  if (token === undefined) {
    throw new NcclNodeError(
      'ERR_INVALID_ARGUMENT',
      `init on rank ${job.rank} of ${job.worldSize}: no job token; set NCCL_NODE_TOKEN to the same secret on every rank, or start the job with nccl-node run`,
    );
  }
  if (job.tokenDerived && !job.agentStore && !warnedDerivedToken && job.rank === 0) {
    warnedDerivedToken = true;
    process.emitWarning(
      `the rendezvous token was derived from the ${job.source} job id; set NCCL_NODE_TOKEN to a secret to keep other users off the store`,
      { code: 'NCCL_NODE_DERIVED_TOKEN' },
    );
  }
  const native = binding();
  // 'auto': NCCL when a GPU, libcuda and libnccl are usable here, else Gloo (src/comm/nccl/nccl-init.ts).
  const backend = chooseBackend(native, o.backend ?? 'auto', job.rank);
  const store = await openStore(job, token, timeoutMs);
  const storeToken = store.token;
  let world: Communicator | undefined;
  const stopTraces = watchTraceRequests(store.client);
  const close = async () => {
    stopTraces();
    // Heartbeats stop (a last one says so) before the store connection closes.
    if (world !== undefined) await releaseCommunicator(world);
    await store.client.close().catch(() => {});
    await store.server?.close().catch(() => {});
  };
  // Under nccl-node run: heartbeats, fatal-error reports, and aborts on a peer's failure.
  const detecting = startFailureDetection(store.client, job.rank);
  const watched = (comm: Communicator): Communicator => {
    world = comm;
    watchCommunicator(comm);
    return comm;
  };
  try {
    await announceJoin(store.client, { rank: job.rank, pid: process.pid, host: hostname(), localRank: job.localRank });
    if (backend === 'nccl') {
      const comm = await createNcclComm(native, { ...job, storeHost: store.host, storePort: store.port, token: storeToken, timeoutMs });
      return watched(new Communicator({
        native: comm, timeoutMs, localRank: job.localRank, localSize: job.localWorldSize, onClose: close, callerStacks: o.callerStacks, explainFailure: explainFailure(),
      }));
    }
    const comm = await createGlooComm(native, {
      ...job, storeHost: store.host, storePort: store.port, token: storeToken, timeoutMs,
      iface: o.iface, localAddress: store.client.localAddress, checkAgreement: o.checkCollectives ?? true,
    });
    return watched(new Communicator({
      native: comm,
      timeoutMs,
      localRank: job.localRank,
      localSize: job.localWorldSize,
      onClose: close,
      callerStacks: o.callerStacks,
      explainFailure: explainFailure(),
    }));
  } catch (err) {
    if (detecting && world === undefined) await stopFailureDetection();
    await close();
    throw err;
  }
}
