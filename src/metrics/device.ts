/**
 * The device side of MFU and memory: which peak this rank's FLOPs are measured
 * against, and how to read its GPU's memory. On a GPU, NVML names the device (the
 * datasheet table in flops.ts) and reports memory in use; on a CPU the peak is
 * measured in this process.
 */
import { currentDevice } from '../gpu/current-device.js';
import { gpuPeakFlops, measureCpuPeak, type PeakFlops, type Precision } from './flops.js';

export interface DeviceMetrics {
  peak: PeakFlops | null;
  deviceMemory?: () => Promise<number | null>;
}

/**
 * cpu: the measured peak, no device memory. cuda: the table's peak for NVML's name of
 * this process's device at `precision` (null when the table lacks the GPU, so MFU is
 * not reported rather than wrong), and NVML's memory.used of that device.
 */
export async function deviceMetrics(device: 'cpu' | 'cuda', precision: Precision = 'fp32'): Promise<DeviceMetrics> {
  if (device === 'cpu') return { peak: measureCpuPeak() };
  // Loaded here: NVML is only needed, and only loadable, on the GPU path.
  const { health } = await import('../gpu/health.js');
  const index = currentDevice();
  const read = async () => (await health()).devices[index] ?? null;
  const dev = await read().catch(() => null);
  return {
    peak: dev?.name ? gpuPeakFlops(dev.name, precision) : null,
    deviceMemory: async () => (await read())?.memory?.used ?? null,
  };
}
