/**
 * The CUDA device this process uses by default: LOCAL_RANK, as torch.distributed does,
 * unless NCCL_NODE_DEVICE names one (nccl-node bench sets it for NCCL_TESTS_DEVICE).
 */
export function currentDevice(): number {
  return deviceOverride() ?? fromEnv(process.env.LOCAL_RANK) ?? 0;
}

/** NCCL_NODE_DEVICE when it is a non-negative integer; the NCCL communicator uses it too. */
export function deviceOverride(): number | undefined {
  return fromEnv(process.env.NCCL_NODE_DEVICE);
}

function fromEnv(raw: string | undefined): number | undefined {
  const v = raw === undefined || raw === '' ? NaN : Number(raw);
  return Number.isInteger(v) && v >= 0 ? v : undefined;
}
