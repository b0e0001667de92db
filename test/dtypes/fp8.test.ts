// fp8 (float8e4m3, float8e5m2) against an implementation written by others: the
// ml_dtypes package's conversions, and NCCL's reduction rule (widen both operands to
// half, combine in half, narrow back with saturation: NCCL's reduce_kernel.h) computed
// with numpy's float16. Covers the TypeScript conversions and the native reductions on
// both backends (Gloo on host arrays, NCCL through the stand-ins on DeviceBuffers).
import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { floatToFp8e4m3, floatToFp8e5m2, fp8e4m3ToFloat, fp8e5m2ToFloat } from '../../src/index.js';
import { standinEnv } from '../gpu/helpers.js';
import { pythonWith } from '../helpers/python.js';
import { describeRanks, runRanks } from '../helpers/ranks.js';

const FORMATS = {
  float8e4m3: { ml: 'float8_e4m3fn', max: 448, encode: floatToFp8e4m3, decode: fp8e4m3ToFloat },
  float8e5m2: { ml: 'float8_e5m2', max: 57344, encode: floatToFp8e5m2, decode: fp8e5m2ToFloat },
} as const;

// Values to encode: every code's value, the midpoints between neighbours (exact ties),
// points a hair either side of them, subnormals, and a seeded spread across magnitudes.
function probes(): number[] {
  const out: number[] = [0, -0, 1e-30, -1e-30, 1e9, -1e9, Infinity, -Infinity, NaN];
  for (const f of Object.values(FORMATS)) {
    const vals = Array.from({ length: 128 }, (_, c) => f.decode(c)).filter(Number.isFinite);
    for (let i = 0; i + 1 < vals.length; i++) {
      const mid = (vals[i]! + vals[i + 1]!) / 2;
      for (const v of [vals[i]!, mid, mid * (1 + 2 ** -20), mid * (1 - 2 ** -20)]) out.push(v, -v);
    }
  }
  let seed = 12345;
  for (let i = 0; i < 4000; i++) {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    const exp = (seed % 48) - 24;
    out.push(Math.fround(((seed >>> 8) / 2 ** 24) * 2 ** exp * (seed & 1 ? -1 : 1)));
  }
  return out.map(Math.fround);
}

const PY = String.raw`
import json, sys, base64, numpy as np, ml_dtypes
req = json.load(sys.stdin)
out = {}
for name, spec in req["formats"].items():
    t = getattr(ml_dtypes, spec["ml"])
    mx = spec["max"]
    codes = np.arange(256, dtype=np.uint8)
    vals = codes.view(t).astype(np.float64)
    out[name] = {"decode": [None if np.isnan(v) else float(v) if np.isfinite(v) else str(v) for v in vals]}
    x = np.frombuffer(base64.b64decode(req["probes"]), dtype=np.float32)
    # CUDA's narrowing saturates finite and infinite values (__NV_SATFINITE); ml_dtypes
    # does not, so clip first: that is the only difference between the two.
    enc = np.clip(x, -mx, mx).astype(t).view(np.uint8)
    out[name]["encode"] = enc.tolist()
    a = np.repeat(codes, 256).view(t).astype(np.float16)
    b = np.tile(codes, 256).view(t).astype(np.float16)
    with np.errstate(all="ignore"):
        # __hmax/__hmin return the other operand when one is NaN: numpy's fmax/fmin.
        res = {"sum": a + b, "prod": a * b, "max": np.fmax(a, b), "min": np.fmin(a, b)}
    for op, h in res.items():
        h = h.astype(np.float32)
        r = np.clip(h, -mx, mx).astype(t).view(np.uint8)
        out[name][op] = base64.b64encode(r.tobytes()).decode()
json.dump(out, sys.stdout)
`;

type Ref = Record<string, { decode: (number | string | null)[]; encode: number[] } & Record<string, string>>;

describe('fp8 against ml_dtypes and NCCL\'s reduction rule', () => {
  const values = probes();
  let ref: Ref;
  const reference = async () => {
    if (ref) return ref;
    const python = await pythonWith(['numpy', 'ml-dtypes']);
    // float32 bytes: JSON has no -0, NaN or infinities.
    const probesB64 = Buffer.from(new Float32Array(values).buffer).toString('base64');
    const input = JSON.stringify({ probes: probesB64, formats: FORMATS });
    ref = JSON.parse(execFileSync(python, ['-c', PY], { input, maxBuffer: 64 << 20 }).toString()) as Ref;
    return ref;
  };

  it('decodes every code and encodes ties, subnormals and out-of-range values as ml_dtypes does', async () => {
    const r = await reference();
    for (const [name, f] of Object.entries(FORMATS)) {
      const decoded = Array.from({ length: 256 }, (_, c) => f.decode(c));
      const json = (v: number) => (Number.isNaN(v) ? null : Number.isFinite(v) ? v : v > 0 ? 'inf' : '-inf');
      expect(decoded.map(json), name).toEqual(r[name]!.decode);
      const bad = values.flatMap((v, i) => {
        const got = f.encode(v);
        const want = r[name]!.encode[i]!;
        const same = got === want || (Number.isNaN(v) && Number.isNaN(f.decode(got)) && Number.isNaN(f.decode(want)));
        return same ? [] : [`${name} ${v}: got 0x${got.toString(16)} want 0x${want.toString(16)}`];
      });
      expect(bad.slice(0, 5), `${bad.length} of ${values.length} encodings differ`).toEqual([]);
    }
  }, 300_000);

  for (const backend of ['gloo', 'nccl'] as const) {
    it(`${backend}: all 65536 operand pairs of sum, prod, max and min reduce as NCCL does`, async () => {
      const r = await reference();
      const results = await runRanks('test/dtypes/fp8-worker.ts', 2, {
        env: { BACKEND: backend, ...(backend === 'nccl' ? standinEnv() : {}) },
        timeoutMs: 120_000,
      });
      expect(results.map((x) => x.code), describeRanks(results)).toEqual([0, 0]);
      const got = results[0]!.reports[0]!.results as Record<string, string>;
      for (const [name, f] of Object.entries(FORMATS)) {
        for (const op of ['sum', 'prod', 'max', 'min']) {
          const mine = Buffer.from(got[`${name}/${op}`]!, 'base64');
          const want = Buffer.from(r[name]![op]!, 'base64');
          const bad: string[] = [];
          for (let p = 0; p < 65536; p++) {
            const same = mine[p] === want[p] || (Number.isNaN(f.decode(mine[p]!)) && Number.isNaN(f.decode(want[p]!)));
            if (!same) bad.push(`0x${(p >> 8).toString(16)} ${op} 0x${(p & 0xff).toString(16)}: got 0x${mine[p]!.toString(16)} want 0x${want[p]!.toString(16)}`);
          }
          expect(bad.slice(0, 5), `${name} ${op}: ${bad.length} of 65536 pairs differ`).toEqual([]);
        }
      }
    }, 300_000);
  }
});
