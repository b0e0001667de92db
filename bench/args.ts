/**
 * The command-line reading the comm benchmarks share: `--name value` flags and sizes
 * written as bytes with an optional K, M or G suffix (powers of 1024), whole bytes.
 */

/** The value after `name` on the command line, or `def`. */
export const arg = (name: string, def: string): string => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1]! : def;
};

/** "8", "512K", "256M", "1G" -> bytes. */
export const bytesOf = (s: string): number =>
  Math.round(Number.parseFloat(s) * ({ K: 1024, M: 1024 ** 2, G: 1024 ** 3 }[s.slice(-1)] ?? 1));
