/**
 * Options of every public call, validated once at the boundary with zod; what
 * crosses to native code is a plain, already-checked value.
 */
import { z } from 'zod';
import { DTYPES, REDUCE_OPS } from '../dtypes.js';
import { NcclNodeError } from '../errors.js';

const timeoutMs = z.number().int().min(1).max(2 ** 31 - 1);
const rank = z.number().int().min(0);

export const initSchema = z.strictObject({
  backend: z.enum(['auto', 'gloo', 'nccl']).optional(),
  rank: rank.optional(),
  worldSize: z.number().int().min(1).optional(),
  localRank: rank.optional(),
  localWorldSize: z.number().int().min(1).optional(),
  masterAddr: z.string().min(1).optional(),
  masterPort: z.number().int().min(1).max(65535).optional(),
  token: z.string().min(1).optional(),
  /** Default deadline of every operation, and of joining the group (10 minutes). */
  timeoutMs: timeoutMs.optional(),
  /** Check on every collective that all ranks made the same call (on by default). */
  checkCollectives: z.boolean().optional(),
  /**
   * Capture the JS stack at every call so a failure points at its caller (default:
   * NCCL_NODE_CALLER_STACKS=1). Off by default: a capture costs ~10 µs a call.
   */
  callerStacks: z.boolean().optional(),
  /** Network interface for Gloo's connections (else NCCL_NODE_SOCKET_IFNAME / GLOO_SOCKET_IFNAME). */
  iface: z.string().min(1).optional(),
});
export type InitOptions = z.infer<typeof initSchema>;

const dtype = z.enum(DTYPES);
const op = z.enum(REDUCE_OPS);

export const commonSchema = z.strictObject({ timeoutMs: timeoutMs.optional(), dtype: dtype.optional() });
export const allReduceSchema = commonSchema.extend({ op: op.optional(), out: z.unknown().optional() });
export const reduceSchema = allReduceSchema.extend({ root: rank.optional() });
export const rootedSchema = commonSchema.extend({ root: rank.optional() });
export const reduceScatterSchema = commonSchema.extend({ op: op.optional() });
const counts = z.array(z.number().int().min(0).max(Number.MAX_SAFE_INTEGER));
/** allToAll: element counts per peer, in rank order; both or neither (equal blocks). */
export const allToAllSchema = commonSchema
  .extend({ sendCounts: counts.optional(), recvCounts: counts.optional() })
  .refine((o) => (o.sendCounts === undefined) === (o.recvCounts === undefined), {
    message: 'sendCounts and recvCounts must be given together',
    path: ['sendCounts'],
  });
export const barrierSchema = z.strictObject({ timeoutMs: timeoutMs.optional() });
export const splitSchema = z.strictObject({
  color: z.number().int().min(-1).max(2 ** 31 - 1),
  key: z.number().int().min(-(2 ** 31)).max(2 ** 31 - 1).optional(),
  timeoutMs: timeoutMs.optional(),
});

export type CommonOptions = z.infer<typeof commonSchema>;
export type AllReduceOptions<B> = Omit<z.infer<typeof allReduceSchema>, 'out'> & { out?: B };
export type ReduceOptions<B> = Omit<z.infer<typeof reduceSchema>, 'out'> & { out?: B };
export type RootedOptions = z.infer<typeof rootedSchema>;
export type ReduceScatterOptions = z.infer<typeof reduceScatterSchema>;
export type AllToAllOptions = z.infer<typeof allToAllSchema>;
export type BarrierOptions = z.infer<typeof barrierSchema>;
export type SplitOptions = z.infer<typeof splitSchema>;

/** What rootOnly() lets through: the other options of a rooted call are absent. */
export type RootOnly = { root: number; out?: unknown } & Partial<Record<'timeoutMs' | 'dtype' | 'op', undefined>>;

/**
 * `{ root: r }` and nothing else (a reduce's `{ root: r, out }` too, withOut), the usual
 * options of a rooted call, checked without zod; undefined for anything else, which then
 * goes through the schema, so every error reads as it does there. The schema's parse was
 * the largest part of such a call's JavaScript (0.15 of a 0.64 µs broadcast at 1 rank)
 * and, once hot, V8's largest compile of the call path (about 10 ms of a core,
 * bench/README.md). `out` is any value, as the schema's; the call checks it.
 */
export function rootOnly(value: unknown, withOut = false): RootOnly | undefined {
  if (typeof value !== 'object' || value === null || Object.getPrototypeOf(value) !== Object.prototype) return undefined;
  let hasRoot = false;
  let hasOut = false;
  for (const key in value) {
    if (key === 'root') hasRoot = true;
    else if (key === 'out' && withOut) hasOut = true;
    else return undefined;
  }
  const { root, out } = value as { root?: unknown; out?: unknown };
  if (!hasRoot || !Number.isSafeInteger(root) || (root as number) < 0) return undefined;
  return hasOut ? { root: root as number, out } : { root: root as number };
}

/** Parses options; a failure is ERR_INVALID_ARGUMENT naming the call and each bad field. */
export function parse<S extends z.ZodType>(schema: S, value: unknown, where: string): z.infer<S> {
  const result = schema.safeParse(value ?? {});
  if (result.success) return result.data;
  const issues = result.error.issues
    .map((i) => `${i.path.length ? i.path.join('.') : 'options'}: ${i.message}`)
    .join('; ');
  throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${where}: invalid options: ${issues}`, {
    issues: result.error.issues,
  });
}
