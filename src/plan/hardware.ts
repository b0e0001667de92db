/**
 * Accelerator table for capacity planning. Figures are the vendor's datasheet
 * numbers per GPU; bandwidths are per direction (what a ring all-reduce moves at,
 * nccl-tests' "bus bandwidth"), i.e. half of the bidirectional figure NVIDIA quotes.
 *
 * Sources:
 * - H100 SXM5 and H200 SXM: NVIDIA H100 / H200 Tensor Core GPU datasheets
 *   (989 TFLOPS dense BF16, the 1,979 figure is with 2:4 sparsity; NVLink 4 at
 *   900 GB/s bidirectional), one 400 Gb/s ConnectX-7 InfiniBand NIC per GPU
 *   (DGX H100 / H200 system datasheets).
 * - GB200 NVL72: NVIDIA GB200 NVL72 datasheet (180 PFLOPS dense FP16/BF16,
 *   13.4 TB HBM3e, 576 TB/s HBM bandwidth and 130 TB/s NVLink 5 bandwidth, all
 *   for 72 GPUs), one 800 Gb/s ConnectX-8 NIC per GPU.
 */
export interface GpuSpec {
  /** Display name. */
  name: string;
  /** Peak dense BF16 tensor FLOP/s (no sparsity). */
  peakBf16Flops: number;
  /** HBM capacity in bytes (decimal GB, as the datasheet states it). */
  hbmBytes: number;
  /** HBM bandwidth in bytes/s. */
  hbmBandwidth: number;
  /** NVLink bandwidth per GPU per direction, bytes/s. */
  nvlinkBandwidth: number;
  /** Scale-out (InfiniBand) bandwidth per GPU per direction, bytes/s. */
  ibBandwidth: number;
  /** GPUs in one NVLink domain (a DGX/HGX node, or the NVL72 rack). */
  nvlinkDomain: number;
}

const GB = 1e9;
const TB = 1e12;

export const GPUS = {
  'h100-sxm': {
    name: 'H100 SXM',
    peakBf16Flops: 989e12,
    hbmBytes: 80 * GB,
    hbmBandwidth: 3.35 * TB,
    nvlinkBandwidth: 450 * GB,
    ibBandwidth: 50 * GB,
    nvlinkDomain: 8,
  },
  h200: {
    name: 'H200 SXM',
    peakBf16Flops: 989e12,
    hbmBytes: 141 * GB,
    hbmBandwidth: 4.8 * TB,
    nvlinkBandwidth: 450 * GB,
    ibBandwidth: 50 * GB,
    nvlinkDomain: 8,
  },
  'gb200-nvl72': {
    name: 'GB200 NVL72 (per B200 GPU)',
    peakBf16Flops: 180e15 / 72,
    hbmBytes: 13.4 * TB / 72,
    hbmBandwidth: 576 * TB / 72,
    nvlinkBandwidth: 130 * TB / 72 / 2,
    ibBandwidth: 100 * GB,
    nvlinkDomain: 72,
  },
} as const satisfies Record<string, GpuSpec>;

export type GpuType = keyof typeof GPUS;
export const GPU_TYPES = Object.keys(GPUS) as GpuType[];
