/**
 * The few C printf conversions nccl-tests' output uses (%f, %e, %g with widths),
 * reproduced exactly, because parsers written for nccl-tests split on those
 * fixed widths and golden files compare byte for byte.
 */

/** Right-justifies like "%*s". */
export function padLeft(s: string, width: number): string {
  return s.length >= width ? s : ' '.repeat(width - s.length) + s;
}

/** Left-justifies like "%-*s". */
export function padRight(s: string, width: number): string {
  return s.length >= width ? s : s + ' '.repeat(width - s.length);
}

function special(x: number): string | undefined {
  if (Number.isNaN(x)) return 'nan';
  if (x === Infinity) return 'inf';
  if (x === -Infinity) return '-inf';
  return undefined;
}

/**
 * "%.<p>f". JS toFixed rounds ties away from zero, glibc rounds the exact binary
 * value half to even; toFixed(100) shows that exact value, so ties are found there.
 */
export function fixed(x: number, p: number): string {
  const s = special(x);
  if (s) return s;
  const neg = x < 0 || Object.is(x, -0);
  const a = Math.abs(x);
  let out = a.toFixed(p);
  const exact = a < 1e21 ? a.toFixed(Math.min(100, p + 60)) : undefined;
  if (exact) {
    const tail = exact.slice(exact.length - (Math.min(100, p + 60) - p));
    if (/^50*$/.test(tail)) {
      // A true tie: keep the even neighbour.
      const down = exact.slice(0, exact.length - tail.length).replace(/\.$/, '');
      const lastDigit = Number(down.replace('.', '').slice(-1));
      if (lastDigit % 2 === 0) out = down;
    }
  }
  // glibc keeps the sign of negative values that round to zero ("-0.00").
  return neg ? `-${out}` : out;
}

/** "%.<p>e": at least two exponent digits, as C prints them. */
export function expo(x: number, p: number): string {
  const s = special(x);
  if (s) return s;
  const [m, e] = x.toExponential(p).split('e') as [string, string];
  const sign = e.startsWith('-') ? '-' : '+';
  const digits = e.replace(/^[+-]/, '');
  return `${m}e${sign}${digits.length < 2 ? `0${digits}` : digits}`;
}

/** "%g" (precision 6): %e or %f by exponent, trailing zeros removed. */
export function general(x: number, precision = 6): string {
  const s = special(x);
  if (s) return s;
  const p = precision === 0 ? 1 : precision;
  if (x === 0) return Object.is(x, -0) ? '-0' : '0';
  const e = Number(expo(x, p - 1).split('e')[1]);
  const strip = (t: string) => (t.includes('.') ? t.replace(/\.?0+$/, '') : t);
  if (e < p && e >= -4) return strip(fixed(x, p - 1 - e));
  const [m, ex] = expo(x, p - 1).split('e') as [string, string];
  return `${strip(m)}e${ex}`;
}

/** snprintf(buf, width+1, ...) keeps at most `width` characters. */
function fits(s: string, width: number): boolean {
  return s.length <= width;
}

/**
 * nccl-tests' getFloatStr: %.2f, else %.1f, else %.0f, else %.1e (width >= 7) or
 * %.0e, whichever fits the column; the last one is cut to the width like snprintf.
 */
export function getFloatStr(value: number, width: number): string {
  for (const p of [2, 1, 0]) {
    const s = padLeft(fixed(value, p), width);
    if (fits(s, width)) return s;
  }
  return padLeft(expo(value, width >= 7 ? 1 : 0), width).slice(0, width);
}
