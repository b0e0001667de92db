/**
 * NCCL_TESTS_SPLIT / NCCL_TESTS_SPLIT_MASK (nccl-tests' run() in common.cu): a color
 * per world rank; ranks of one color form a group that runs the test on its own
 * communicator (comm.split with key = world rank, as MPI_Comm_split(color, proc)).
 * NCCL_TESTS_DEVICE: the first GPU index (atoi), replacing the local rank.
 */
import type { Communicator } from '../comm/communicator.js';
import type { Collective } from './collective.js';
import { UsageError } from './config.js';
import type { Control } from './driver.js';

/** C's strtoul(s, &end, base) cast to int: the value's low 32 bits, signed; null when no digits. */
export function strtoulInt(s: string, base: number): { value: number; end: number } | null {
  let i = 0;
  while (i < s.length && /\s/.test(s[i]!)) i++;
  let neg = false;
  if (s[i] === '+' || s[i] === '-') neg = s[i++] === '-';
  const hexPrefix = /^0[xX][0-9a-fA-F]/.test(s.slice(i));
  if ((base === 0 || base === 16) && hexPrefix) {
    base = 16;
    i += 2;
  } else if (base === 0) base = s[i] === '0' ? 8 : 10;
  const start = i;
  let v = 0n;
  let overflow = false;
  for (; i < s.length; i++) {
    const d = parseInt(s[i]!, 36);
    if (Number.isNaN(d) || d >= base) break;
    v = v * BigInt(base) + BigInt(d);
    if (v >= 1n << 64n) overflow = true;
  }
  if (i === start) return null;
  // Out of range saturates to ULONG_MAX; a minus sign negates in unsigned arithmetic.
  let u = overflow ? (1n << 64n) - 1n : v;
  if (neg && !overflow) u = BigInt.asUintN(64, -u);
  return { value: Number(BigInt.asIntN(32, u)), end: i };
}

/** parseInt of common.cu: leading blanks skipped, "0b" binary, otherwise strtoul(s, 0). */
function parseSplitInt(s: string): number | null {
  const t = s.replace(/^\s+/, '');
  if (!t) return null;
  if (t.slice(0, 2).toLowerCase() === '0b') return strtoulInt(t.slice(2), 2)?.value ?? 0;
  return strtoulInt(t, 0)?.value ?? null;
}

const SPLIT_OPS: Array<[string[], (proc: number, v: number) => number]> = [
  [['AND', '&'], (p, v) => p & v],
  [['OR', '|'], (p, v) => p | v],
  [['MOD', '%'], (p, v) => p % v],
  [['DIV', '/'], (p, v) => Math.trunc(p / v)],
];

/**
 * The group color of world rank `proc`; 0 (one group) when neither variable is set
 * or the expression is not understood, as nccl-tests. MOD 0 / DIV 0, which crash
 * nccl-tests, are usage errors, and so is a negative color (MPI_Comm_split refuses it).
 */
export function splitColor(env: NodeJS.ProcessEnv, proc: number): number {
  const mask = env.NCCL_TESTS_SPLIT_MASK;
  let color = 0;
  if (mask !== undefined) color = proc & (strtoulInt(mask, 16)?.value ?? 0);
  else if (env.NCCL_TESTS_SPLIT !== undefined) {
    const expr = env.NCCL_TESTS_SPLIT;
    for (const [names, apply] of SPLIT_OPS) {
      const name = names.find((n) => expr.slice(0, n.length).toUpperCase() === n);
      if (name === undefined) continue;
      const v = parseSplitInt(expr.slice(name.length));
      if (v === null) continue;
      if (v === 0 && (name === 'MOD' || name === '%' || name === 'DIV' || name === '/')) {
        throw new UsageError(`NCCL_TESTS_SPLIT=${expr}: division by zero`);
      }
      color = apply(proc, v);
    }
  }
  if (color < 0) throw new UsageError(`NCCL_TESTS_SPLIT${mask !== undefined ? '_MASK' : ''}: rank ${proc} gets the negative color ${color}`);
  return color;
}

/** NCCL_TESTS_DEVICE as atoi reads it; undefined when unset (nccl-tests' -1). */
export function firstDevice(env: NodeJS.ProcessEnv): number | undefined {
  const raw = env.NCCL_TESTS_DEVICE;
  if (raw === undefined) return undefined;
  const m = /^\s*([+-]?\d+)/.exec(raw);
  const v = m ? Number.parseInt(m[1]!, 10) : 0;
  return v === -1 ? undefined : v;
}

/**
 * The communicator the test runs on: the world, or with NCCL_TESTS_SPLIT(_MASK) this
 * rank's group. Every group runs the same sequence of steps in lockstep with the
 * others (the Control exchanges span the world), so groups of different sizes are
 * refused where that would change the number of steps (-r -1, hypercube).
 */
export async function splitGroup(world: Communicator, color: number, control: Control, coll: Collective, root: number): Promise<Communicator> {
  const splitting = process.env.NCCL_TESTS_SPLIT_MASK !== undefined || process.env.NCCL_TESTS_SPLIT !== undefined;
  const group = splitting ? await world.split({ color, key: world.rank }) : world;
  if (!group) throw new Error(`split: rank ${world.rank} got no group for color ${color}`);
  const [min, max] = splitting
    ? [(await control.allReduce([group.size], 'min'))[0]!, (await control.allReduce([group.size], 'max'))[0]!]
    : [world.size, world.size];
  let problem: string | undefined;
  if (coll.rooted && root >= min) problem = `-r ${root}: root must be -1 or a rank below ${min}`;
  else if (min !== max && ((coll.rooted && root === -1) || coll.powerOfTwo)) {
    problem = `NCCL_TESTS_SPLIT: groups of ${min} to ${max} ranks would run different numbers of tests; use groups of equal size`;
  }
  if (problem) {
    if (group !== world) await group.destroy().catch(() => {});
    throw new UsageError(problem);
  }
  return group;
}
