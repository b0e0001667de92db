/**
 * The command-line reading the comm benchmarks share: `--name value` flags and sizes
 * written as bytes with an optional K, M or G suffix (powers of 1024), whole bytes; the two
 * sides of an A/B run.
 */
import { resolve } from 'node:path';

/** The value after `name` on the command line, or `def`. */
export const arg = (name: string, def: string): string => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1]! : def;
};

/** "8", "512K", "256M", "1G" -> bytes. */
export const bytesOf = (s: string): number =>
  Math.round(Number.parseFloat(s) * ({ K: 1024, M: 1024 ** 2, G: 1024 ** 3 }[s.slice(-1)] ?? 1));

/**
 * The two sides of an A/B benchmark run as gangs of processes: `--against <checkout>`
 * (another checkout's sources) or `--against-env NAME=VALUE` (this checkout with one
 * variable set). `roots` are the checkouts' directories, `env` what each side's ranks
 * add to their environment, `against` how the other side is named in tables and JSON.
 */
export interface Sides {
  roots: { this: string; against: string };
  env: { this: Record<string, string>; against: Record<string, string> };
  against: string;
}

export function sidesOf(bench: string, here: string, againstDir: string | undefined, againstEnv: string | undefined): Sides {
  if (!againstDir === !againstEnv) throw new Error(`${bench}: give one of --against <checkout> or --against-env NAME=VALUE`);
  const pair = againstEnv ? /^([A-Z0-9_]+)=(.*)$/.exec(againstEnv) : null;
  if (againstEnv && !pair) throw new Error(`${bench}: --against-env takes NAME=VALUE, received ${againstEnv}`);
  const roots = { this: here, against: againstDir ? resolve(againstDir) : here };
  return {
    roots,
    env: { this: {}, against: pair ? { [pair[1]!]: pair[2]! } : {} },
    against: againstDir ? roots.against : `this checkout with ${againstEnv}`,
  };
}
