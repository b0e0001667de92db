/**
 * GPU health from NVML (native/nvml/): ECC, retired pages / remapped rows,
 * clock-event (throttle) reasons, temperature, power, utilization, memory, PCIe
 * replays, NVLink error counters and fabric health (GB200 / NVSwitch systems), plus
 * a stream of Xid events. A counter the GPU does not support is `null`
 * ("unavailable", not a failure); other NVML errors also null the field and are
 * named in the device's `errors`. NCCL_NODE_LIBNVML names another library file.
 */
import { fromNative, NcclNodeError } from '../errors.js';
import { binding } from '../native.js';

export interface EccCounts { corrected: number | null; uncorrected: number | null }
export interface NvLinkHealth {
  link: number;
  active: boolean;
  errors: { replay: number | null; recovery: number | null; crcFlit: number | null; crcData: number | null; eccData: number | null };
}
export type FabricState = 'not_started' | 'in_progress' | 'completed';
export type FabricSummary = 'not_supported' | 'healthy' | 'unhealthy' | 'limited_capacity';
export interface FabricHealth {
  state: FabricState;
  status: string;
  cliqueId: number;
  clusterUuid: string;
  healthSummary: FabricSummary;
  healthMask: number;
  /** Decoded healthMask; null where the GPU says "not supported". */
  degradedBandwidth: boolean | null;
  routeRecovery: boolean | null;
  routeUnhealthy: boolean | null;
  accessTimeoutRecovery: boolean | null;
  incorrectConfiguration: number;
  partitionAssigned: boolean | null;
}

export interface GpuHealth {
  index: number;
  name: string | null;
  uuid: string | null;
  pciBusId: string | null;
  ecc: { enabled: boolean; pendingEnabled: boolean; volatile: EccCounts; aggregate: EccCounts } | null;
  /** Pre-Ampere page retirement; null on GPUs that remap rows instead. */
  retiredPages: { singleBit: number; doubleBit: number; pending: boolean | null } | null;
  /** Ampere+ row remapping; null under MIG or on older GPUs. */
  remappedRows: { corrected: number; uncorrected: number; pending: boolean; failed: boolean } | null;
  clockEventReasons: { mask: number; reasons: ClockEventReason[] } | null;
  temperatureC: number | null;
  powerMilliwatts: number | null;
  powerLimitMilliwatts: number | null;
  utilization: { gpu: number; memory: number } | null;
  memory: { total: number; reserved: number; free: number; used: number } | null;
  pcieReplayCount: number | null;
  nvlinks: NvLinkHealth[] | null;
  fabric: FabricHealth | null;
  /** Field -> NVML error name, for errors other than NOT_SUPPORTED. */
  errors: Record<string, string>;
  /** Set when the device could not even be opened; every other field is then absent. */
  error?: string;
  /** What looks wrong, in words (empty when healthy). */
  problems: string[];
}

export interface HealthReport {
  driverVersion: string | null;
  nvmlVersion: string | null;
  cudaDriverVersion: number | null;
  devices: GpuHealth[];
  healthy: boolean;
}

/** nvmlClocksEventReasons bits (reference §13.4). */
export const CLOCK_EVENT_REASONS = {
  gpuIdle: 0x1, applicationsClocksSetting: 0x2, swPowerCap: 0x4, hwSlowdown: 0x8, syncBoost: 0x10,
  swThermalSlowdown: 0x20, hwThermalSlowdown: 0x40, hwPowerBrakeSlowdown: 0x80, displayClockSetting: 0x100,
} as const;
export type ClockEventReason = keyof typeof CLOCK_EVENT_REASONS;
/** Reasons that mean the GPU is being slowed by heat or power, not by choice or idleness. */
const THROTTLING: ClockEventReason[] = ['hwSlowdown', 'swThermalSlowdown', 'hwThermalSlowdown', 'hwPowerBrakeSlowdown'];

const FABRIC_STATES: Record<number, FabricState> = { 1: 'not_started', 2: 'in_progress', 3: 'completed' };
const FABRIC_SUMMARY: FabricSummary[] = ['not_supported', 'healthy', 'unhealthy', 'limited_capacity'];

/** A 2-bit healthMask field: 0 = not supported, 1 = true, 2 = false. */
function tri(mask: number, shift: number): boolean | null {
  const v = (mask >>> shift) & 3;
  return v === 1 ? true : v === 2 ? false : null;
}

type Raw = Record<string, any>;

function decodeDevice(raw: Raw): GpuHealth {
  const d = { ...raw, errors: raw.errors ?? {}, problems: [] } as unknown as GpuHealth;
  if (typeof raw.clockEventReasons === 'number') {
    const mask = raw.clockEventReasons;
    const reasons = (Object.keys(CLOCK_EVENT_REASONS) as ClockEventReason[]).filter((k) => (mask & CLOCK_EVENT_REASONS[k]) !== 0);
    d.clockEventReasons = { mask, reasons };
  }
  if (raw.fabric) {
    const f = raw.fabric, m = f.healthMask as number;
    d.fabric = {
      state: FABRIC_STATES[f.state] ?? 'not_started', status: f.status, cliqueId: f.cliqueId, clusterUuid: f.clusterUuid,
      healthSummary: FABRIC_SUMMARY[f.healthSummary] ?? 'not_supported', healthMask: m,
      degradedBandwidth: tri(m, 0), routeRecovery: tri(m, 2), routeUnhealthy: tri(m, 4), accessTimeoutRecovery: tri(m, 6),
      incorrectConfiguration: (m >>> 8) & 0xf, partitionAssigned: tri(m, 12),
    };
  }
  d.problems = assess(d);
  return d;
}

/** The problems a device's counters show, in words; pure, so tests and `doctor` share it. */
export function assess(d: GpuHealth): string[] {
  const p: string[] = [];
  if (d.error) return [`cannot be opened (${d.error})`];
  const errs = Object.entries(d.errors);
  if (errs.some(([, e]) => e === 'NVML_ERROR_GPU_IS_LOST')) return ['GPU is lost (NVML_ERROR_GPU_IS_LOST): reset or reboot'];
  if (errs.length) p.push(`NVML errors reading ${errs.map(([k, e]) => `${k} (${e})`).join(', ')}`);
  const vu = d.ecc?.volatile.uncorrected;
  if (vu) p.push(`${vu} uncorrected ECC errors since the driver loaded`);
  if (d.remappedRows?.failed) p.push('row remapping failed: the GPU needs service');
  if (d.remappedRows?.pending) p.push('row remapping pending: reset the GPU');
  if (d.retiredPages?.pending) p.push('page retirement pending: reset the GPU');
  const hot = d.clockEventReasons?.reasons.filter((r) => THROTTLING.includes(r)) ?? [];
  if (hot.length) p.push(`clocks slowed: ${hot.join(', ')}`);
  const down = d.nvlinks?.filter((l) => !l.active).map((l) => l.link) ?? [];
  if (down.length) p.push(`NVLink ${down.join(', ')} down`);
  if (d.fabric && d.fabric.state !== 'completed') p.push(`fabric registration ${d.fabric.state}`);
  if (d.fabric && (d.fabric.healthSummary === 'unhealthy' || d.fabric.healthSummary === 'limited_capacity')) {
    p.push(`fabric ${d.fabric.healthSummary.replace('_', ' ')}`);
  }
  return p;
}

/** NVML health of every GPU on this machine. Rejects with ERR_UNAVAILABLE when NVML cannot be loaded. */
export async function health(): Promise<HealthReport> {
  const callSite = new Error();
  let raw: Raw;
  try {
    raw = (await binding().health()) as Raw;
  } catch (err) {
    throw fromNative(err, callSite);
  }
  const devices = (raw.devices as Raw[]).map(decodeDevice);
  return { driverVersion: raw.driverVersion, nvmlVersion: raw.nvmlVersion, cudaDriverVersion: raw.cudaDriverVersion,
    devices, healthy: devices.every((d) => d.problems.length === 0) };
}

/** nvmlEventType bits the watch registers. */
export const NVML_EVENTS = { doubleBitEcc: 0x2, xid: 0x8, gpuUnavailable: 0x4000, recoveryAction: 0x8000 } as const;

export interface XidEvent {
  /** NVML device index (-1 if the handle was not recognised) and its UUID. */
  device: number;
  uuid: string | null;
  type: keyof typeof NVML_EVENTS | 'other';
  eventType: number;
  /** The Xid (999 = unknown) for `type: 'xid'`, else null; `data` is NVML's raw eventData. */
  xid: number | null;
  data: number;
  gpuInstanceId: number | null;
  computeInstanceId: number | null;
  time: Date;
}

export interface XidWatch extends Disposable {
  /** How many GPUs the watch registered with. */
  readonly devices: number;
  /** Ends the watch; returns within about 100 ms. Idempotent. */
  stop(): void;
}

const NA = 0xffffffff;

/**
 * Calls `callback` for each Xid (and double-bit ECC, GPU-unavailable, recovery-action)
 * event NVML reports. The watch waits on its own thread and does not keep the process
 * alive. If the event set breaks, `onError` (default: a process warning) is told and the watch ends.
 */
export function onXid(callback: (event: XidEvent) => void, onError?: (err: NcclNodeError) => void): XidWatch {
  const native = binding().onXid((raw) => {
    if (typeof raw.error === 'string') {
      const err = new NcclNodeError('ERR_NVML', `onXid: ${raw.error}`);
      if (onError) onError(err); else process.emitWarning(err.message, 'NcclNodeWarning');
      return;
    }
    const eventType = raw.eventType as number;
    const type = (Object.keys(NVML_EVENTS) as (keyof typeof NVML_EVENTS)[]).find((k) => NVML_EVENTS[k] === eventType) ?? 'other';
    callback({
      device: raw.device as number, uuid: raw.uuid as string | null, type, eventType,
      xid: type === 'xid' ? (raw.data as number) : null, data: raw.data as number,
      gpuInstanceId: raw.gpuInstanceId === NA ? null : (raw.gpuInstanceId as number),
      computeInstanceId: raw.computeInstanceId === NA ? null : (raw.computeInstanceId as number),
      time: new Date(),
    });
  });
  return { devices: native.devices, stop: () => native.stop(), [Symbol.dispose]: () => native.stop() };
}
