/** Element types: names, native codes (ncclDataType_t order) and inference from TypedArrays. */
import { NcclNodeError } from './errors.js';

export const DTYPES = [
  'int8',
  'uint8',
  'int32',
  'uint32',
  'int64',
  'uint64',
  'float16',
  'float32',
  'float64',
  'bfloat16',
  'float8e4m3',
  'float8e5m2',
] as const;
export type DType = (typeof DTYPES)[number];

export const DTYPE_CODE: Record<DType, number> = {
  int8: 0,
  uint8: 1,
  int32: 2,
  uint32: 3,
  int64: 4,
  uint64: 5,
  float16: 6,
  float32: 7,
  float64: 8,
  bfloat16: 9,
  float8e4m3: 10,
  float8e5m2: 11,
};

export const DTYPE_BYTES: Record<DType, number> = {
  int8: 1,
  uint8: 1,
  int32: 4,
  uint32: 4,
  int64: 8,
  uint64: 8,
  float16: 2,
  float32: 4,
  float64: 8,
  bfloat16: 2,
  float8e4m3: 1,
  float8e5m2: 1,
};

export const REDUCE_OPS = ['sum', 'prod', 'max', 'min', 'avg'] as const;
export type ReduceOp = (typeof REDUCE_OPS)[number];
/** ncclRedOp_t order: max before min. */
export const REDUCE_OP_CODE: Record<ReduceOp, number> = { sum: 0, prod: 1, max: 2, min: 3, avg: 4 };

export type HostArray =
  | Int8Array
  | Uint8Array
  | Int32Array
  | Uint32Array
  | BigInt64Array
  | BigUint64Array
  | Uint16Array
  | Float32Array
  | Float64Array;

/** The TypedArray constructor that holds a dtype's elements. */
export function arrayTypeOf(dtype: DType) {
  switch (dtype) {
    case 'int8': return Int8Array;
    case 'uint8': case 'float8e4m3': case 'float8e5m2': return Uint8Array;
    case 'int32': return Int32Array;
    case 'uint32': return Uint32Array;
    case 'int64': return BigInt64Array;
    case 'uint64': return BigUint64Array;
    case 'float16': case 'bfloat16': return Uint16Array;
    case 'float32': return Float32Array;
    case 'float64': return Float64Array;
  }
}

function describe(value: unknown): string {
  if (value === null) return 'null';
  if (ArrayBuffer.isView(value)) return value.constructor.name;
  if (typeof value === 'object') return (value as object).constructor?.name ?? 'object';
  return typeof value;
}

/**
 * The dtype of a buffer: inferred from its TypedArray class, or the explicit one,
 * which must agree with the class (a Uint16Array carries float16 or bfloat16, a
 * Uint8Array uint8 or, with an explicit dtype, fp8 on the NCCL backend or Gloo).
 */
export function dtypeOf(buf: unknown, explicit: DType | undefined, where: string): DType {
  const inferred = inferDType(buf);
  if (explicit !== undefined) {
    const Ctor = arrayTypeOf(explicit);
    if (!(buf instanceof Ctor) && !isDeviceLike(buf, explicit)) {
      throw new NcclNodeError(
        'ERR_INVALID_ARGUMENT',
        `${where}: dtype ${explicit} is held in a ${Ctor.name}, received a ${describe(buf)}`,
      );
    }
    return explicit;
  }
  if (inferred === 'uint16') {
    throw new NcclNodeError(
      'ERR_INVALID_ARGUMENT',
      `${where}: a Uint16Array holds float16 or bfloat16 data; pass {dtype: 'float16'} or {dtype: 'bfloat16'}`,
    );
  }
  if (inferred === undefined) {
    throw new NcclNodeError(
      'ERR_INVALID_ARGUMENT',
      `${where}: expected a Float32Array, Float64Array, Int8Array, Uint8Array, Int32Array, Uint32Array, ` +
        `BigInt64Array, BigUint64Array or Uint16Array (with dtype), received ${describe(buf)}`,
    );
  }
  return inferred;
}

function inferDType(buf: unknown): DType | 'uint16' | undefined {
  if (buf instanceof Float32Array) return 'float32';
  if (buf instanceof Float64Array) return 'float64';
  if (buf instanceof Int8Array) return 'int8';
  if (buf instanceof Uint8Array) return 'uint8';
  if (buf instanceof Int32Array) return 'int32';
  if (buf instanceof Uint32Array) return 'uint32';
  if (buf instanceof BigInt64Array) return 'int64';
  if (buf instanceof BigUint64Array) return 'uint64';
  if (buf instanceof Uint16Array) return 'uint16';
  if (isDeviceLike(buf)) return (buf as { dtype: DType }).dtype;
  return undefined;
}

/** Device buffers (GPU path) carry their own dtype and length. */
export interface DeviceLike {
  readonly dtype: DType;
  readonly length: number;
  readonly byteLength: number;
  readonly device: number;
}

export function isDeviceLike(buf: unknown, dtype?: DType): buf is DeviceLike {
  return (
    typeof buf === 'object' &&
    buf !== null &&
    !ArrayBuffer.isView(buf) &&
    typeof (buf as DeviceLike).device === 'number' &&
    typeof (buf as DeviceLike).dtype === 'string' &&
    (dtype === undefined || (buf as DeviceLike).dtype === dtype)
  );
}

/** Element count of a buffer given its dtype. */
export function lengthOf(buf: HostArray | DeviceLike, dtype: DType): number {
  return buf.byteLength / DTYPE_BYTES[dtype];
}
