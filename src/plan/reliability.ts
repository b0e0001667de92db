/**
 * Failure arithmetic: fleet MTBF, checkpoint intervals, and the interruption table
 * of Llama 3's 54-day pre-training snapshot on 16,384 H100s.
 */

/**
 * Young's first-order optimal checkpoint interval τ = sqrt(2·C·M) for checkpoint cost
 * C and mean time between failures M (Young 1974, "A first order approximation to the
 * optimum checkpoint interval", CACM 17(9)).
 */
export function youngInterval(checkpointSeconds: number, mtbfSeconds: number): number {
  return Math.sqrt(2 * checkpointSeconds * mtbfSeconds);
}

/**
 * Daly's higher-order refinement (Daly 2006, "A higher order estimate of the optimum
 * checkpoint interval for restart dumps", FGCS 22(3), eq. 37): for C < 2M,
 * τ = sqrt(2CM)·[1 + (1/3)·sqrt(C/(2M)) + C/(18M)] − C; otherwise τ = M.
 */
export function dalyInterval(checkpointSeconds: number, mtbfSeconds: number): number {
  const c = checkpointSeconds;
  const m = mtbfSeconds;
  if (c >= 2 * m) return m;
  return Math.sqrt(2 * c * m) * (1 + Math.sqrt(c / (2 * m)) / 3 + c / (18 * m)) - c;
}

/**
 * First-order expected fraction of wall time spent training when checkpointing every
 * τ seconds of work at cost C, failing every M seconds, restarting in R seconds:
 * 1 − C/τ − (τ/2 + R)/M (the waste model behind Young 1974: per failure, half an
 * interval of work is lost on average plus the restart).
 */
export function firstOrderEttr(tau: number, c: number, m: number, r: number): number {
  return Math.max(0, 1 - c / tau - (tau / 2 + r) / m);
}

export interface FaultKind {
  name: string;
  /** Interruptions of this kind in the reference run. */
  count: number;
  /** Whether a node must be replaced (hot spares shorten it). */
  hardware: boolean;
  /** Planned: a checkpoint is taken before it, so no work is lost. */
  planned?: boolean;
}

/**
 * Llama 3 interruption causes over a 54-day snapshot of pre-training on 16,384 H100
 * GPUs: 466 interruptions, 47 planned (automated maintenance) and 419 unexpected
 * (Dubey et al. 2024, "The Llama 3 Herd of Models", section 3.3.4, table 5). Rates
 * derive from the counts; the paper prints 30.1 % beside the 148 faulty-GPU
 * interruptions although 148/419 is 35.3 %; the counts sum to 419.
 */
export const LLAMA3_FAULTS: readonly FaultKind[] = [
  { name: 'Faulty GPU', count: 148, hardware: true },
  { name: 'GPU HBM3 memory', count: 72, hardware: true },
  { name: 'Software bug', count: 54, hardware: false },
  { name: 'Network switch/cable', count: 35, hardware: true },
  { name: 'Host maintenance', count: 32, hardware: true },
  { name: 'GPU SRAM memory', count: 19, hardware: true },
  { name: 'GPU system processor', count: 17, hardware: true },
  { name: 'NIC', count: 7, hardware: true },
  { name: 'NCCL watchdog timeouts', count: 7, hardware: false },
  { name: 'Silent data corruption', count: 6, hardware: true },
  { name: 'GPU thermal interface + sensor', count: 6, hardware: true },
  { name: 'SSD', count: 3, hardware: true },
  { name: 'Power supply', count: 3, hardware: true },
  { name: 'Server chassis', count: 2, hardware: true },
  { name: 'IO expansion board', count: 2, hardware: true },
  { name: 'Dependency', count: 2, hardware: false },
  { name: 'CPU', count: 2, hardware: true },
  { name: 'System memory', count: 2, hardware: true },
  { name: 'Planned maintenance', count: 47, hardware: false, planned: true },
];

export const LLAMA3_GPUS = 16384;
export const LLAMA3_HOURS = 54 * 24;
