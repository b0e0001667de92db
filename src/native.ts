/**
 * The whole native surface of the addon, typed in one place. Everything else in
 * src/ imports the binding from here and never loads the .node file itself.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NcclNodeError } from './errors.js';
import type { GpuBinding } from './gpu/native-types.js';
import type { IoBinding } from './checkpoint/native-types.js';

/** Matches native/core/op.h OpKind. */
export const OpKind = {
  allReduce: 0,
  broadcast: 1,
  reduce: 2,
  allGather: 3,
  reduceScatter: 4,
  allToAll: 5,
  gather: 6,
  scatter: 7,
  send: 8,
  recv: 9,
  barrier: 10,
  split: 11,
} as const;
export type OpName = keyof typeof OpKind;

/** Host memory a collective reads or writes; device buffers join this union. */
export type NativeBuffer = ArrayBufferView | ArrayBuffer;

export interface NativeComm {
  readonly rank: number;
  readonly size: number;
  readonly backend: string;
  readonly version: string;
  readonly inFlight: number;
  readonly state: 'ok' | 'aborted' | 'broken' | 'destroyed';
  submit(
    kind: number,
    dtype: number,
    redop: number,
    send: NativeBuffer | undefined,
    recv: NativeBuffer | undefined,
    count: number,
    rootOrPeer: number,
    timeoutMs: number,
    color?: number,
    key?: number,
    /** allToAll with per-peer element counts (one per rank); count is then ignored. */
    sendCounts?: readonly number[],
    recvCounts?: readonly number[],
    /** NCCL: the sum is of preMulScalar * each rank's input (allReduce, reduceScatter). */
    preMulScalar?: number,
    /** NCCL group boundaries: 0 none, 1 member of the open group, 2 ends it. */
    group?: number,
  ): Promise<NativeComm | null | undefined>;
  /**
   * This rank refused a call locally (bad arguments): queues a stand-in that tells
   * the other ranks, so they fail the same operation and later calls line up.
   */
  reject?(kind: number, code: string, message: string, rootOrPeer: number, timeoutMs: number): void;
  abort(): void;
  destroy(): Promise<void>;
}

export interface GlooOptions {
  rank: number;
  size: number;
  storeHost: string;
  storePort: number;
  token: string;
  prefix: string;
  hostname?: string;
  iface?: string;
  timeoutMs: number;
  checkAgreement: boolean;
}

/** GpuBinding: DeviceBuffer, Stream, Event, createNccl, health (src/gpu/native-types.ts); IoBinding: checkpoint I/O. */
export interface Binding extends GpuBinding, IoBinding {
  createGloo(options: GlooOptions): Promise<NativeComm>;
  /** float -> float16 (false) or bfloat16 (true) bits, with the native rounding. */
  floatTo16(value: number, bf16: boolean): number;
  napiVersion: number;
}

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');
const CANDIDATES = [
  'build/Release/nccl_node.node',
  'build/Debug/nccl_node.node',
];

let cached: Binding | undefined;

/** Loads the addon once; a missing build is an error that says how to make one. */
export function binding(): Binding {
  if (cached) return cached;
  const override = process.env.NCCL_NODE_ADDON;
  const paths = override ? [override] : CANDIDATES.map((p) => join(root, p));
  const require = createRequire(import.meta.url);
  const errors: string[] = [];
  for (const path of paths) {
    if (!existsSync(path)) {
      errors.push(`${path}: not found`);
      continue;
    }
    try {
      cached = require(path) as Binding;
      return cached;
    } catch (err) {
      errors.push(`${path}: ${(err as Error).message}`);
    }
  }
  throw new NcclNodeError(
    'ERR_UNAVAILABLE',
    `the nccl-node addon could not be loaded.\n  Tried:\n    ${errors.join('\n    ')}\n` +
      '  Possible solutions:\n' +
      '    - installed package: npm rebuild nccl-node (needs cmake, g++ and libgloo-dev)\n' +
      '    - checkout: npm run build:native, or bash scripts/setup.sh, which installs what is missing',
  );
}
