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
 * The exact value of a finite double as digits x 10^exp (digits a non-negative
 * integer): a double is m x 2^b, and for b < 0 that is m x 5^-b / 10^-b.
 */
function exact(a: number): { digits: bigint; exp: number } {
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, a);
  const hi = view.getUint32(0);
  const biased = (hi >>> 20) & 0x7ff;
  let m = (BigInt(hi & 0xfffff) << 32n) | BigInt(view.getUint32(4));
  if (biased) m |= 1n << 52n;
  const b = (biased || 1) - 1075;
  return b >= 0 ? { digits: m << BigInt(b), exp: 0 } : { digits: m * 5n ** BigInt(-b), exp: b };
}

/** digits x 10^shift rounded to an integer, an exact tie to the even neighbour (glibc, round-to-nearest). */
function roundScaled(digits: bigint, shift: number): bigint {
  if (shift >= 0) return digits * 10n ** BigInt(shift);
  const div = 10n ** BigInt(-shift);
  const q = digits / div;
  const twice = (digits % div) * 2n;
  return twice > div || (twice === div && q % 2n === 1n) ? q + 1n : q;
}

const sign = (x: number) => (x < 0 || Object.is(x, -0) ? '-' : '');

/** "%.<p>f", the exact binary value rounded half to even; glibc keeps the sign of a negative zero result ("-0.00"). */
export function fixed(x: number, p: number): string {
  const s = special(x);
  if (s) return s;
  const { digits, exp } = exact(Math.abs(x));
  const n = roundScaled(digits, exp + p).toString().padStart(p + 1, '0');
  return `${sign(x)}${p ? `${n.slice(0, n.length - p)}.${n.slice(n.length - p)}` : n}`;
}

/** The p+1 significant digits of |x| and the decimal exponent of the first, after rounding. */
function significant(x: number, p: number): { n: string; e: number } {
  if (x === 0) return { n: '0'.repeat(p + 1), e: 0 };
  const { digits, exp } = exact(Math.abs(x));
  let e = digits.toString().length - 1 + exp;
  let n = roundScaled(digits, exp + p - e).toString();
  if (n.length > p + 1) {
    // rounded up to the next power of ten: 9.99e2 -> 1.00e3
    n = n.slice(0, p + 1);
    e += 1;
  }
  return { n, e };
}

/** "%.<p>e": at least two exponent digits, as C prints them. */
export function expo(x: number, p: number): string {
  const s = special(x);
  if (s) return s;
  const { n, e } = significant(x, p);
  const mant = p ? `${n[0]}.${n.slice(1)}` : n;
  return `${sign(x)}${mant}e${e < 0 ? '-' : '+'}${String(Math.abs(e)).padStart(2, '0')}`;
}

/** "%.<precision>g": %e or %f by the exponent %e would print, trailing zeros removed. */
export function general(x: number, precision = 6): string {
  const s = special(x);
  if (s) return s;
  const p = precision === 0 ? 1 : precision;
  const { e } = significant(x, p - 1);
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
