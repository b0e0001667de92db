// The POC's statistics against scipy and numpy (a venv from the local package index):
// Mann-Whitney U and its asymptotic p-value (ties, all three alternatives, tiny
// p-values), numpy's default percentiles, the normal tail; the bootstrap interval by
// its coverage, and the canary verdict on planted differences.
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { canary, mannWhitneyU, normalSf, percentile, percentileInterval } from '../../src/poc/stats.js';
import { pythonWith } from '../helpers/python.js';
import { mulberry32 } from '../../src/util/prng.js';

const rng = mulberry32;
const normal = (r: () => number) => Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());

const PY = String.raw`
import json, sys, numpy as np
from scipy import stats
cases = json.load(sys.stdin)
out = []
for c in cases:
    if c["kind"] == "mwu":
        r = stats.mannwhitneyu(c["x"], c["y"], alternative=c["alt"], method="asymptotic", use_continuity=True)
        out.append([float(r.statistic), float(r.pvalue)])
    elif c["kind"] == "pct":
        out.append([float(np.percentile(c["x"], p)) for p in c["ps"]])
    else:
        out.append([float(stats.norm.sf(z)) for z in c["zs"]])
json.dump(out, sys.stdout)
`;

describe('POC statistics', () => {
  it('match scipy and numpy', async () => {
    const r = rng(42);
    const cases: Record<string, unknown>[] = [];
    for (let k = 0; k < 60; k++) {
      const n1 = 3 + Math.floor(r() * 60), n2 = 3 + Math.floor(r() * 60);
      const shift = k % 3 === 0 ? 0 : (r() - 0.5) * 3;
      // Rounded values give many ties; some cases well separated for tiny p-values.
      const round = k % 2 === 0 ? 1 : 1000;
      const x = Array.from({ length: n1 }, () => Math.round((normal(r) + shift + (k % 10 === 9 ? 8 : 0)) * round) / round);
      const y = Array.from({ length: n2 }, () => Math.round(normal(r) * round) / round);
      cases.push({ kind: 'mwu', x, y, alt: (['two-sided', 'greater', 'less'] as const)[k % 3] });
      cases.push({ kind: 'pct', x, ps: [0, 1, 25, 50, 90, 95, 99, 99.9, 100] });
    }
    cases.push({ kind: 'sf', zs: [-40, -5, -1, 0, 0.3, 1, 1.96, 2, 3.5, 8, 15, 30] });
    const python = await pythonWith(['numpy', 'scipy']);
    const want = JSON.parse(execFileSync(python, ['-c', PY], { input: JSON.stringify(cases), maxBuffer: 1 << 26 }).toString()) as number[][];
    const rel = (a: number, b: number) => (a === b ? 0 : Math.abs(a - b) / Math.max(Math.abs(b), 1e-300));
    cases.forEach((c, i) => {
      const w = want[i]!;
      if (c.kind === 'mwu') {
        const got = mannWhitneyU(c.x as number[], c.y as number[], c.alt as 'two-sided');
        expect(got.u, `case ${i} U`).toBe(w[0]);
        expect(rel(got.p, w[1]!), `case ${i} p ${got.p} vs ${w[1]}`).toBeLessThan(1e-9);
      } else if (c.kind === 'pct') {
        (c.ps as number[]).forEach((p, j) => expect(rel(percentile(c.x as number[], p), w[j]!), `case ${i} p${p}`).toBeLessThan(1e-12));
      } else {
        (c.zs as number[]).forEach((z, j) => expect(rel(normalSf(z), w[j]!), `sf(${z})`).toBeLessThan(1e-9));
      }
    });
  }, 600_000);

  it('a 95 % bootstrap interval of the p95 covers the true p95 about 95 % of the time', () => {
    // Exponential latencies: the true p95 is -ln(0.05).
    const truth = -Math.log(0.05);
    const r = rng(7);
    let covered = 0;
    const trials = 120;
    for (let t = 0; t < trials; t++) {
      const xs = Array.from({ length: 400 }, () => -Math.log(1 - r()));
      const ci = percentileInterval(xs, 95, { resamples: 400, seed: t + 1 });
      expect(ci.low).toBeLessThanOrEqual(ci.estimate);
      expect(ci.high).toBeGreaterThanOrEqual(ci.estimate);
      if (ci.low <= truth && truth <= ci.high) covered++;
    }
    // Binomial(120, 0.95) stays within [102, 120] with probability > 0.999.
    expect(covered).toBeGreaterThanOrEqual(102);
  });

  it('the canary fails a slower or less accurate candidate and passes an equal one', () => {
    const r = rng(3);
    const base = Array.from({ length: 300 }, () => 50 + 10 * normal(r));
    const same = Array.from({ length: 300 }, () => 50 + 10 * normal(r));
    const slow = Array.from({ length: 300 }, () => 55 + 10 * normal(r));
    const ok = canary({ baseline: { latencies: base, correct: 180, total: 200 }, candidate: { latencies: same, correct: 178, total: 200 } });
    expect(ok.pass, ok.reasons.join('; ')).toBe(true);
    const lat = canary({ baseline: { latencies: base, correct: 180, total: 200 }, candidate: { latencies: slow, correct: 180, total: 200 } });
    expect(lat.pass).toBe(false);
    expect(lat.reasons[0]).toMatch(/latency is worse than the baseline \(Mann-Whitney p = /);
    const acc = canary({ baseline: { latencies: base, correct: 180, total: 200 }, candidate: { latencies: same, correct: 150, total: 200 } });
    expect(acc.pass).toBe(false);
    expect(acc.reasons[0]).toMatch(/accuracy is worse than the baseline \(150\/200 vs 180\/200/);
  });
});
