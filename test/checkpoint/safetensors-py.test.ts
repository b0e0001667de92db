/**
 * The shard files and the consolidated file are standard safetensors: Python's
 * own `safetensors` library (a venv from test/helpers/python.ts, from the local pip
 * index) loads them with safetensors.numpy.load_file and sees the same names,
 * dtypes, shapes and bytes. BF16 is left out: numpy has no bfloat16 dtype.
 * Fails with pip's words if safetensors and numpy cannot be installed.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Checkpointer, consolidate } from '../../src/checkpoint/index.js';
import type { DType } from '../../src/dtypes.js';
import { pythonWith } from '../helpers/python.js';

const scratch = mkdtempSync(join(tmpdir(), 'ckpt-py-'));
let python = '';
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

beforeAll(async () => {
  python = await pythonWith(['safetensors', 'numpy']);
}, 600_000);

const PY = `
import hashlib, json, sys
from safetensors.numpy import load_file
out = {}
for path in sys.argv[1:]:
    out[path] = {k: {"dtype": str(v.dtype), "shape": list(v.shape), "sha256": hashlib.sha256(v.tobytes(order="C")).hexdigest()} for k, v in load_file(path).items()}
print(json.dumps(out))
`;

const NUMPY: Partial<Record<DType, string>> = { float32: 'float32', float16: 'float16', float64: 'float64', int64: 'int64', int32: 'int32', uint8: 'uint8', int8: 'int8' };

function sha(a: ArrayBufferView): string {
  return createHash('sha256').update(Buffer.from(a.buffer, a.byteOffset, a.byteLength)).digest('hex');
}

describe('Python safetensors reads what the checkpointer writes', () => {
  it('shards and the consolidated file load in safetensors.numpy.load_file with the same values', async () => {
    const tensors = {
      'w.f32': { data: new Float32Array(3000).map((_, i) => Math.sin(i) * 1e3), dtype: 'float32' as const, globalShape: [30, 100] },
      'w.f16': { data: new Uint16Array(517).map((_, i) => (i * 97) & 0x7bff), dtype: 'float16' as const, globalShape: [517] },
      'step.i64': { data: new BigInt64Array([1n, -2n, 3n << 50n]), dtype: 'int64' as const, globalShape: [3] },
      'x.f64': { data: new Float64Array([Math.PI, -0, 1e-300]), dtype: 'float64' as const, globalShape: [3] },
      'ids.i32': { data: new Int32Array(1001).map((_, i) => i * 7 - 3000), dtype: 'int32' as const, globalShape: [7, 11, 13] },
      'mask.u8': { data: new Uint8Array(65).map((_, i) => i), dtype: 'uint8' as const, globalShape: [65] },
    };
    const root = join(scratch, 'ckpt');
    const ck = await Checkpointer.create(root, { write: { chunkBytes: 4096 } });
    const info = await (await ck.save({ tensors: Object.fromEntries(Object.entries(tensors).map(([k, t]) => [k, { ...t, offset: 0 }])), train: { step: 3 } })).committed;
    await ck.close();
    const consolidated = join(scratch, 'all.safetensors');
    await consolidate(info.dir, consolidated);
    const shards = readdirSync(info.dir).filter((f) => f.endsWith('.safetensors')).map((f) => join(info.dir, f));
    expect(shards.length).toBe(1);
    writeFileSync(join(scratch, 'read.py'), PY);
    const got = JSON.parse(execFileSync(python, [join(scratch, 'read.py'), ...shards, consolidated], { encoding: 'utf8' })) as
      Record<string, Record<string, { dtype: string; shape: number[]; sha256: string }>>;
    for (const [path, flat] of [[shards[0]!, true], [consolidated, false]] as const) {
      const want = Object.fromEntries(Object.entries(tensors).map(([k, t]) => [k, { dtype: NUMPY[t.dtype]!, shape: flat ? [t.data.length] : t.globalShape, sha256: sha(t.data) }]));
      expect(got[path], path).toEqual(want);
    }
  }, 120_000);
});
