/**
 * nccl-node: collective communication for TypeScript training code.
 *
 *   const comm = await init();
 *   await comm.allReduce(grads, { op: 'avg' });
 */
export { init, DEFAULT_TIMEOUT_MS } from './comm/init.js';
export { Communicator, type Buffer } from './comm/communicator.js';
export { Work } from './comm/work.js';
export { PreparedAllReduce } from './comm/prepared.js';
export { onPeerFailure, type PeerFailure } from './comm/heartbeat.js';
export type {
  InitOptions,
  AllReduceOptions,
  ReduceOptions,
  RootedOptions,
  ReduceScatterOptions,
  AllToAllOptions,
  BarrierOptions,
  SplitOptions,
  CommonOptions,
} from './comm/call-options.js';
export { NcclNodeError, isNcclNodeError, ERROR_CODES, type ErrorCode } from './errors.js';
export { DTYPES, REDUCE_OPS, DTYPE_BYTES, arrayTypeOf, type DType, type ReduceOp, type HostArray } from './dtypes.js';
export { bf16ToFloat, floatToBf16, halfToFloat, floatToHalf } from './util/half.js';
export { fp8e4m3ToFloat, floatToFp8e4m3, fp8e5m2ToFloat, floatToFp8e5m2 } from './util/fp8.js';
export { resolveJobEnv, type JobEnv } from './launch/env.js';
export { StoreClient } from './rendezvous/client.js';
export { StoreServer } from './rendezvous/server.js';
// Flight records of every communicator, any backend (docs/metrics.md).
export { dumpTraces, traceDir, type TraceFile } from './comm/flight-record.js';
// GPU path (docs/gpu.md): device memory, streams, NCCL extras, kernels, health.
export { DeviceBuffer, PinnedHostBuffer, type AllocOptions } from './gpu/device-buffer.js';
export { Stream, Event } from './gpu/stream.js';
export { group, allReducePreMulSum, reduceScatterPreMulSum } from './comm/nccl/group.js';
export { probeLibrary, detectBackend, LIBRARY_ENV, type GpuLibrary } from './gpu/detect.js';
export * as kernels from './gpu/cuda-kernels.js';
export { gpuInfo, dumpFlightRecords } from './gpu/info.js';
export { Registration, type RegisterOptions } from './comm/nccl/register.js';
export { health, onXid, assess, type HealthReport, type GpuHealth, type XidEvent, type XidWatch } from './gpu/health.js';
// Training runtime (docs/runtime.md): DDP bucketing, FSDP/ZeRO sharding, optimizers, device mesh.
export * as runtime from './runtime/index.js';
// Sharded checkpoints (docs/checkpoint.md); also the subpath nccl-node/checkpoint.
export * as checkpoint from './checkpoint/index.js';
// Token corpora: prepare, read, deterministic resumable batches (docs/data.md); also nccl-node/data.
export * as data from './data/index.js';
export { DistributedDataParallel, FullyShardedDataParallel, DeviceMesh, createOptimizer } from './runtime/index.js';
export type { ParamLike, ModelHooks, DataParallel, DDPOptions, FSDPOptions, OptimizerOptions, MeshOptions } from './runtime/index.js';
// Elastic training: shrink, rejoin with live state, the recovery ladder (docs/fault-tolerance.md).
export * as ft from './ft/index.js';
