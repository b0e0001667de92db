/**
 * The one error type of nccl-node. `code` is stable across releases; scripts and
 * other tools branch on it, never on the message.
 */
export const ERROR_CODES = [
  'ERR_INVALID_ARGUMENT',
  'ERR_SIZE_MISMATCH',
  'ERR_TIMEOUT',
  'ERR_COMM_DESTROYED',
  'ERR_COMM_ABORTED',
  'ERR_PEER_LOST',
  'ERR_BACKEND',
  'ERR_STORE',
  'ERR_UNAUTHORIZED',
  'ERR_UNAVAILABLE',
  'ERR_NCCL',
  'ERR_CUDA',
  'ERR_NVML',
  'ERR_IO',
  /** Data read back does not match its checksum or digest (a damaged or edited checkpoint). */
  'ERR_CHECKSUM',
  'ERR_LAUNCH',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

export class NcclNodeError extends Error {
  override readonly name = 'NcclNodeError';
  readonly code: ErrorCode;
  readonly details: Record<string, unknown>;

  constructor(code: ErrorCode, message: string, details: Record<string, unknown> = {}) {
    super(message);
    this.code = code;
    this.details = details;
  }
}

export function isNcclNodeError(err: unknown, code?: ErrorCode): err is NcclNodeError {
  return err instanceof NcclNodeError && (code === undefined || err.code === code);
}

function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && (ERROR_CODES as readonly string[]).includes(value);
}

/**
 * The addon throws and rejects with NcclNodeErrors itself (src/native.ts hands it
 * the class). An error it builds when off-thread work completes was made with no
 * JavaScript on the stack; given `callSite` (an Error captured before the call went
 * off-thread, as sharp does), such an error gets the caller's stack instead. Anything
 * else (a non-NcclNodeError from a callback, say) becomes an NcclNodeError with the
 * code it carries, or ERR_BACKEND.
 */
export function fromNative(err: unknown, callSite?: Error): NcclNodeError {
  let out: NcclNodeError;
  if (err instanceof NcclNodeError) {
    out = err;
    if (hasFrames(out)) return out;
  } else {
    const raw = err as { code?: unknown; message?: unknown } | undefined;
    const code = isErrorCode(raw?.code) ? raw.code : 'ERR_BACKEND';
    out = new NcclNodeError(code, typeof raw?.message === 'string' ? raw.message : String(err));
  }
  if (callSite?.stack) {
    out.stack = `${out.name} [${out.code}]: ${out.message}\n${callSite.stack.split('\n').slice(1).join('\n')}`;
  }
  return out;
}

/** Whether V8 recorded any JavaScript frame for `err` (it records none for one made in a native callback). */
function hasFrames(err: Error): boolean {
  return typeof err.stack === 'string' && err.stack.includes('\n    at ');
}
