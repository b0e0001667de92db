/**
 * A hardware profile: the GpuSpec plan() computes with, measured on one machine by
 * calibrate() (./calibrate.ts) instead of taken from a datasheet, plus the raw
 * measurements behind it, which predict() (./predict.ts) uses directly. On a CPU
 * machine a "GPU" is one rank: the figures are per rank, and the NVLink domain is
 * the ranks that share the machine.
 */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { NcclNodeError } from '../errors.js';
import type { GpuSpec } from './hardware.js';
import { gpuSpecSchema, parseInput } from './schema.js';

const pos = z.number().positive().finite();
const nonneg = z.number().nonnegative().finite();

export const PROFILE_KIND = 'nccl-node/hardware-profile';

const allReduceRow = z.strictObject({ bytes: pos, timeUs: pos, busBw: nonneg });

export const calibrationSchema = z.strictObject({
  /** Cores of the machine: ranks beyond them share cores (their compute slows down in proportion). */
  cores: z.number().int().positive(),
  /** measureCpuPeak(): the best-case float32 multiply-add loop on one thread, FLOP/s. */
  cpuPeakFlops: pos,
  /** linear + linearBackward of src/models/tiny-lm/kernels.ts at one shape, FLOP/s (6·rows·in·out per pass). */
  matmul: z.strictObject({ rows: z.number().int().positive(), inDim: z.number().int().positive(), outDim: z.number().int().positive(), flopsPerSecond: pos }),
  /** attention + attentionBackward of src/models/gpt/layers.ts, FLOP/s (12·D per visited query-key pair). */
  attention: z.strictObject({ T: z.number().int().positive(), dim: z.number().int().positive(), heads: z.number().int().positive(), flopsPerSecond: pos }),
  /** Float32Array copy, bytes read + written per second (what an elementwise optimizer step streams at). */
  memoryBandwidth: pos,
  /** All-reduce sweep through the addon on `ranks` local ranks, and the ring model fitted to it. */
  allReduce: z.strictObject({
    ranks: z.number().int().min(2),
    backend: z.string(),
    rows: z.array(allReduceRow).min(1),
    /** Per-hop latency α of the ring model t = 2(n−1)·α + 2(n−1)/n · bytes / busBandwidth. */
    latencySeconds: nonneg,
    busBandwidth: pos,
  }),
  /** write + fsync of one file. */
  disk: z.strictObject({ dir: z.string(), bytes: pos, seconds: pos, bandwidth: pos }),
});

export const profileSchema = z.strictObject({
  kind: z.literal(PROFILE_KIND),
  version: z.literal(1),
  measuredAt: z.string(),
  host: z.strictObject({ hostname: z.string(), cpuModel: z.string(), node: z.string(), memoryBytes: pos }),
  gpu: gpuSpecSchema,
  /** Matmul fraction of peakBf16Flops: plan()'s `efficiency` when none is given. */
  efficiency: z.number().gt(0).max(1),
  /** Checkpoint write bandwidth of the machine: plan()'s `storageBandwidth` when none is given. */
  storageBandwidth: pos,
  calibration: calibrationSchema,
});

export type HardwareProfile = z.output<typeof profileSchema>;
export type Calibration = z.output<typeof calibrationSchema>;

export function parseProfile(value: unknown): HardwareProfile {
  return parseInput('hardware profile', profileSchema, value);
}

/** Reads and validates a profile file (`plan --hardware FILE`). */
export function readProfile(file: string): HardwareProfile {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `hardware profile: expected a readable JSON file, got ${(err as Error).message}`);
  }
  return parseProfile(raw);
}

export const specOf = (p: HardwareProfile): GpuSpec => ({ ...p.gpu });
