/**
 * %e, %f and %g against the machine's C printf (glibc): the same doubles, given to
 * both as raw bits, must print the same text. glibc rounds the exact binary value,
 * ties to even, which JavaScript's toExponential/toFixed do not (ties go up).
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { expo, fixed, general } from '../../src/nccl-tests/printf.js';

const dir = mkdtempSync(join(tmpdir(), 'nn-printf-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// Reads "<conversion> <precision> <hex bits>" lines, prints one result a line.
const C_SOURCE = `
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <inttypes.h>
int main(void) {
  char conv; int prec; uint64_t bits;
  while (scanf(" %c %d %" SCNx64, &conv, &prec, &bits) == 3) {
    double x; memcpy(&x, &bits, sizeof x);
    char fmt[16]; snprintf(fmt, sizeof fmt, "%%.%d%c\\n", prec, conv);
    printf(fmt, x);
  }
  return 0;
}
`;

function cPrintf(cases: Array<[string, number, number]>): string[] {
  writeFileSync(join(dir, 'p.c'), C_SOURCE);
  execFileSync('cc', ['-O1', '-o', join(dir, 'p'), join(dir, 'p.c')]);
  const bits = new BigUint64Array(1);
  const view = new Float64Array(bits.buffer);
  const input = cases.map(([c, p, x]) => {
    view[0] = x;
    return `${c} ${p} ${bits[0]!.toString(16)}`;
  });
  const out = execFileSync(join(dir, 'p'), { input: `${input.join('\n')}\n`, maxBuffer: 64 << 20 }).toString();
  return out.split('\n').slice(0, cases.length);
}

const ours = (c: string, p: number, x: number) => (c === 'e' ? expo(x, p) : c === 'f' ? fixed(x, p) : general(x, p));

/** A seeded generator (mulberry32), so a failure can be reproduced. */
function rng(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function values(n: number): number[] {
  const ties = [0.125, 0.375, 565, 2.5, 0.5, 1.5, 1e21, 1e22, 5e-324, 2.2250738585072014e-308, 2.225073858507201e-308,
    1.7976931348623157e308, 0.05, 0.15, 0.25, 1.25, 12.5, 125, 1250, 1e15 + 0.5, 9.5, 99.5, 999.5, 0.0009765625,
    4.35, 1e-5, 1e-4, 123456.5, 1234565, 0, -0, 1, 10, 100, 1e6, 999999.5, 9999995, 0.00001525878906250];
  const out = ties.flatMap((v) => [v, -v]);
  const r = rng(20260516);
  const bits = new BigUint64Array(1);
  const f = new Float64Array(bits.buffer);
  while (out.length < n) {
    const k = out.length % 4;
    if (k === 0) {
      // any finite double, by its bits
      bits[0] = (BigInt(Math.floor(r() * 2 ** 32)) << 32n) | BigInt(Math.floor(r() * 2 ** 32));
      if (Number.isFinite(f[0]!)) out.push(f[0]!);
    } else if (k === 1) {
      out.push((r() - 0.5) * 10 ** Math.floor(r() * 40 - 20)); // the magnitudes benchmarks print
    } else if (k === 2) {
      // short decimals: many land on or next to ties at the printed precision
      out.push(Math.round(r() * 1e6) / 10 ** Math.floor(r() * 8));
    } else {
      // integers and halves up to 2^53, exact ties for %e
      out.push(Math.floor(r() * 2 ** Math.floor(r() * 53)) + (r() < 0.5 ? 0.5 : 0));
    }
  }
  return out;
}

describe('printf conversions match glibc', () => {
  it('60,000 doubles through %e, %f and %g at several precisions', () => {
    const convs: Array<[string, number]> = [['e', 0], ['e', 1], ['e', 2], ['e', 6], ['e', 16], ['g', 6], ['g', 1], ['g', 3], ['g', 17], ['f', 0], ['f', 1], ['f', 2]];
    const xs = values(60_000);
    const cases = xs.map((x, i) => {
      const [c, p] = convs[i % convs.length]!;
      // %f of the largest doubles prints hundreds of digits; keep it to printable sizes
      return [c, p, c === 'f' && Math.abs(x) > 1e60 ? x / 1e250 : x] as [string, number, number];
    });
    // every exact tie through every conversion as well
    for (const x of xs.slice(0, 80)) for (const [c, p] of convs) cases.push([c, p, x]);
    const want = cPrintf(cases);
    const diffs = cases.map(([c, p, x], i) => ({ fmt: `%.${p}${c}`, x, ours: ours(c, p, x), c: want[i] })).filter((d) => d.ours !== d.c);
    expect(diffs.slice(0, 10)).toEqual([]);
    expect(cases.length).toBeGreaterThanOrEqual(60_000);
  });

  it('known ties', () => {
    expect(expo(565, 1)).toBe('5.6e+02');
    expect(expo(2.5, 0)).toBe('2e+00');
    expect(general(0.125, 2)).toBe('0.12');
    expect(general(1e21)).toBe('1e+21');
  });
});
