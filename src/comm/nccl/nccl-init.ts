/** The NCCL half of init(): backend choice and communicator creation (used by src/comm/init.ts). */
import { NcclNodeError } from '../../errors.js';
import type { Binding } from '../../native.js';
import { LIBRARY_ENV, detectBackend, probeLibrary } from '../../gpu/detect.js';
import { NcclComm } from './nccl-comm.js';
import { deviceOverride } from '../../gpu/current-device.js';

/**
 * Why NCCL cannot be used here, or undefined when it can: the libraries found by file
 * (for 'auto' only: 'nccl' loads what it is told to), then loaded, then a GPU.
 */
function ncclUnusable(native: Binding, byFile: boolean): string | undefined {
  if (byFile) {
    const found = detectBackend();
    if (found.backend !== 'nccl') return found.reason;
  }
  if (typeof native.gpuInfo !== 'function') return 'this build of the addon has no GPU support';
  const info = native.gpuInfo();
  return !info.cuda ? info.cudaError : !info.nccl ? info.ncclError : info.devices === 0 ? 'no CUDA device is visible' : undefined;
}

/** For backend 'auto': the libraries are found by file, then load, and see a GPU. */
export function ncclUsable(native: Binding): boolean {
  return ncclUnusable(native, true) === undefined;
}

/**
 * 'gloo', 'nccl' (checked now, before any rendezvous) or 'auto'. 'auto' says why it
 * chose Gloo (one warning line) when some NCCL library is there or named, since then
 * NCCL was probably meant; a machine with none of them falls back silently.
 */
export function chooseBackend(native: Binding, requested: 'auto' | 'gloo' | 'nccl', rank: number): 'gloo' | 'nccl' {
  if (requested === 'gloo') return 'gloo';
  if (requested === 'auto') {
    const why = ncclUnusable(native, true);
    if (why === undefined) return 'nccl';
    if (probeLibrary('nccl').path || process.env[LIBRARY_ENV.cuda]) {
      process.emitWarning(`init on rank ${rank}: backend 'auto' uses Gloo: ${why.split('\n')[0]}`, { code: 'NCCL_NODE_BACKEND_FALLBACK' });
    }
    return 'gloo';
  }
  if (typeof native.gpuInfo !== 'function') {
    throw new NcclNodeError('ERR_UNAVAILABLE', `init on rank ${rank}: this build of the addon has no GPU support; rebuild it`);
  }
  const why = ncclUnusable(native, false);
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
  /** Store key prefix of the unique id (default the world's; an elastic generation has its own). */
  prefix?: string;
  /** Leave a faulted NCCL communicator for shrink({ abort: true }) instead of aborting it. */
  keepOnFault?: boolean;
}

/** Joins the world communicator on device LOCAL_RANK (or NCCL_NODE_DEVICE); the unique id goes over the store. */
export async function createNcclComm(native: Binding, j: NcclInit): Promise<NcclComm> {
  const comm = await native.createNccl({
    rank: j.rank,
    size: j.worldSize,
    device: deviceOverride() ?? j.localRank,
    storeHost: j.storeHost,
    storePort: j.storePort,
    token: j.token,
    prefix: j.prefix ?? 'nccl-node/nccl/world/',
    timeoutMs: j.timeoutMs,
    ...(j.keepOnFault ? { keepOnFault: true } : {}),
  });
  return new NcclComm(comm, comm.gpuControl);
}
