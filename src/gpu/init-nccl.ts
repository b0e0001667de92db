/** The NCCL half of init(): backend choice and communicator creation (used by src/comm/init.ts). */
import { NcclNodeError, fromNative } from '../errors.js';
import type { Binding } from '../native.js';
import { detectBackend } from './detect.js';
import { NcclComm } from './nccl-comm.js';
import { deviceOverride } from './device.js';

/** For backend 'auto': the libraries are found by file, then load, and see a GPU. */
export function ncclUsable(native: Binding): boolean {
  if (detectBackend().backend !== 'nccl' || typeof native.gpuInfo !== 'function') return false;
  const info = native.gpuInfo();
  return info.cuda && info.nccl && info.devices > 0;
}

/** 'gloo', 'nccl' (checked now, before any rendezvous) or 'auto'. */
export function chooseBackend(native: Binding, requested: 'auto' | 'gloo' | 'nccl', rank: number): 'gloo' | 'nccl' {
  if (requested === 'gloo') return 'gloo';
  if (requested === 'auto') return ncclUsable(native) ? 'nccl' : 'gloo';
  if (typeof native.gpuInfo !== 'function') {
    throw new NcclNodeError('ERR_UNAVAILABLE', `init on rank ${rank}: this build of the addon has no GPU support; rebuild it`);
  }
  const info = native.gpuInfo();
  const why = !info.cuda ? info.cudaError : !info.nccl ? info.ncclError : info.devices === 0 ? 'no CUDA device is visible' : undefined;
  if (why) throw new NcclNodeError('ERR_UNAVAILABLE', `init on rank ${rank}: the nccl backend is unavailable: ${why}`);
  return 'nccl';
}

export interface NcclInit {
  rank: number;
  worldSize: number;
  localRank: number;
  storeHost: string;
  storePort: number;
  token: string;
  timeoutMs: number;
}

/** Joins the world communicator on device LOCAL_RANK (or NCCL_NODE_DEVICE); the unique id goes over the store. */
export async function createNcclComm(native: Binding, j: NcclInit): Promise<NcclComm> {
  let comm;
  try {
    comm = await native.createNccl({
      rank: j.rank,
      size: j.worldSize,
      device: deviceOverride() ?? j.localRank,
      storeHost: j.storeHost,
      storePort: j.storePort,
      token: j.token,
      prefix: 'nccl-node/nccl/world/',
      timeoutMs: j.timeoutMs,
    });
  } catch (err) {
    throw fromNative(err);
  }
  return new NcclComm(comm, comm.gpuControl);
}
