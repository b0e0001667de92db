/** The CUDA device this process uses by default: LOCAL_RANK, as torch.distributed does. */
export function currentDevice(): number {
  const raw = process.env.LOCAL_RANK;
  const v = raw === undefined || raw === '' ? 0 : Number(raw);
  return Number.isInteger(v) && v >= 0 ? v : 0;
}
