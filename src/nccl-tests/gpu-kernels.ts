/**
 * The benchmark's two verifiable-data kernels (native/kernels/kernels.cu,
 * verifiable_defs.h): prepare writes a rank's input or the expected result of a
 * (dtype, op, nranks, seed) test for elements offset.., compare counts wrong
 * elements on the device. They compute exactly what verifiable.ts computes on the
 * host; test/bench/gpu-verifiable.test.ts holds them to it.
 */
import { DTYPE_CODE, REDUCE_OP_CODE, type DType } from '../dtypes.js';
import type { DeviceBuffer } from '../gpu/device-buffer.js';
import { binding, nativeHandle, type NativeDeviceBuffer } from '../native.js';
import type { GenOp } from './verifiable.js';

interface VerifiableKernels {
  verifiablePrepare(buf: NativeDeviceBuffer, count: number, dtype: number, op: number, nranks: number, rank: number, seed: number, offset: number): Promise<void>;
  verifiableCompare(actual: NativeDeviceBuffer, expected: NativeDeviceBuffer, count: number, dtype: number, op: number): Promise<number>;
}

/** The kernels' op code: the project's RedOp, 5 for a copy. */
export const genOpCode = (op: GenOp): number => (op === 'nil' ? 5 : REDUCE_OP_CODE[op]);

function k(): VerifiableKernels {
  return binding().kernels as unknown as VerifiableKernels;
}

/** Calls f so that whatever it throws, the caller gets as a rejection. */
async function run<T>(f: () => Promise<T>): Promise<T> {
  return f();
}

/** rank >= 0: that rank's input; rank -1: the expected result over nranks ranks. */
export function prepareOnDevice(buf: DeviceBuffer, dtype: DType, op: GenOp, nranks: number, rank: number, seed: number, offset: number): Promise<void> {
  return run(() => k().verifiablePrepare(buf[nativeHandle], buf.length, DTYPE_CODE[dtype], genOpCode(op), nranks, rank, seed >>> 0, offset));
}

export function compareOnDevice(actual: DeviceBuffer, expected: DeviceBuffer, dtype: DType, op: GenOp): Promise<number> {
  return run(() => k().verifiableCompare(actual[nativeHandle], expected[nativeHandle], actual.length, DTYPE_CODE[dtype], genOpCode(op)));
}
