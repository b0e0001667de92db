/** What the GPU libraries report here, and on-demand flight-record dumps. */
import { binding } from '../native.js';
import type { GpuInfo } from '../native/contract.js';

/** Which GPU libraries load, their versions and the device count; never throws for a missing library. */
export function gpuInfo(): GpuInfo {
  return binding().gpuInfo();
}

/**
 * Writes every NCCL communicator's flight record in this process to
 * $NCCL_NODE_FLIGHT_RECORDER_DIR (default: the temp dir) as
 * nccl-node-fr-rank<R>-<pid>.json; returns the path.
 */
export function dumpFlightRecords(reason = 'requested'): string {
  return binding().dumpFlightRecords(reason);
}
