/** Single-process checks: round trip, checksums, corruption, fallback, busy policy, interval. */
import { readFileSync, mkdtempSync, rmSync, truncateSync, writeFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Checkpointer, dalyInterval, latest, load, listCheckpoints, verify, youngInterval, consolidate, checkpointEverySteps } from '../../src/checkpoint/index.js';
import { decodeHeader } from '../../src/checkpoint/safetensors.js';
import { io } from '../../src/checkpoint/io.js';
import { crc32cConcat } from '../../src/checkpoint/crc.js';
import { isNcclNodeError } from '../../src/errors.js';

const roots: string[] = [];
function tmp(): string {
  const d = mkdtempSync(join(tmpdir(), 'ckpt-unit-'));
  roots.push(d);
  return d;
}
afterEach(() => {
  for (const d of roots.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** Bit-exact comparison (deep equality on large arrays is slow in vitest). */
function sameBytes(a: ArrayBufferView, b: ArrayBufferView): boolean {
  return Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.byteLength), Buffer.from(b.buffer, b.byteOffset, b.byteLength)) === 0;
}

function state(step: number, n = 300_000) {
  const w = new Float32Array(n).map((_, i) => Math.fround(Math.cos(i + step)));
  const bf = new Uint16Array(1001).map((_, i) => (i * 7 + step) & 0xffff);
  const big = new BigInt64Array([1n, -2n, BigInt(step) << 40n]);
  const f64 = new Float64Array([Math.PI, step / 3]);
  return {
    tensors: {
      'model.w': { data: w, globalShape: [n / 100, 100], offset: 0 },
      'model.bf': { data: bf, dtype: 'bfloat16' as const, globalShape: [1001], offset: 0 },
      'opt.count': { data: big, globalShape: [3], offset: 0 },
      'opt.f64': { data: f64, globalShape: [2], offset: 0 },
    },
    train: { step, rng: { s: [1, 2, 3, step] }, cursor: step * 4 },
    metadata: { config: { lr: 0.1 }, codeVersion: 'abc123', dataVersion: 'd1' },
  };
}

function targets(n = 300_000) {
  return {
    'model.w': { data: new Float32Array(n), offset: 0 },
    'model.bf': { data: new Uint16Array(1001), dtype: 'bfloat16' as const, offset: 0 },
    'opt.count': { data: new BigInt64Array(3), offset: 0 },
    'opt.f64': { data: new Float64Array(2), offset: 0 },
  };
}

describe('checkpoint', () => {
  it('crc32c matches the standard check value, in one call or in pieces', () => {
    const b = new TextEncoder().encode('123456789');
    expect(io().crc32c(b)).toBe(0xe3069283);
    expect(io().crc32c(b.subarray(4), io().crc32c(b.subarray(0, 4)))).toBe(0xe3069283);
  });

  it('CRC32C of a concatenation follows from the parts\' CRCs and lengths', () => {
    const parts = [0, 1, 7, 4096, 100_003].map((n, k) => new Uint8Array(n).map((_, i) => (i * 131 + k * 17) & 0xff));
    let all = new Uint8Array(0);
    for (const p of parts) all = new Uint8Array([...all, ...p]);
    expect(crc32cConcat(parts.map((p) => ({ crc: io().crc32c(p), bytes: p.length })))).toBe(io().crc32c(all));
  });

  it('round trips bit-exactly, with train state and metadata, as valid safetensors', async () => {
    const root = tmp();
    const ck = await Checkpointer.create(root);
    const s = state(7);
    const h = await ck.save(s);
    await h.committed;
    const t = targets();
    const r = await load(root, t);
    expect(r.step).toBe(7);
    expect(r.train).toEqual(s.train);
    expect(r.metadata).toEqual(s.metadata);
    expect(sameBytes(t['model.w'].data, s.tensors['model.w'].data)).toBe(true);
    expect(t['model.bf'].data).toEqual(s.tensors['model.bf'].data);
    expect(t['opt.count'].data).toEqual(s.tensors['opt.count'].data);
    expect(t['opt.f64'].data).toEqual(s.tensors['opt.f64'].data);
    // The shard is plain safetensors: header parses, offsets are back to back, bytes match.
    const file = readFileSync(join(h.dir, 'rank-00000-of-00001.safetensors'));
    const st = decodeHeader(new Uint8Array(file), 'shard');
    const w = st.tensors.get('model.w')!;
    expect(w.dtype).toBe('float32');
    expect(sameBytes(file.subarray(w.begin, w.end), s.tensors['model.w'].data)).toBe(true);
    const sorted = [...st.tensors.values()].sort((a, b) => a.begin - b.begin);
    sorted.forEach((x, i) => i && expect(x.begin).toBe(sorted[i - 1]!.end));
    expect(sorted.at(-1)!.end).toBe(file.length);
    // Consolidated: global shapes in one file.
    const out = join(root, 'all.safetensors');
    await consolidate(h.dir, out);
    const c = decodeHeader(new Uint8Array(readFileSync(out)), 'all');
    expect(c.tensors.get('model.w')!.shape).toEqual([3000, 100]);
  });

  it('a flipped byte is reported with its file and tensor; fallback loads the previous checkpoint', async () => {
    const root = tmp();
    const ck = await Checkpointer.create(root);
    await (await ck.save(state(1))).committed;
    const h2 = await ck.save(state(2));
    await h2.committed;
    const f = join(h2.dir, 'rank-00000-of-00001.safetensors');
    const bytes = readFileSync(f);
    bytes[bytes.length - 600_000]! ^= 0x10; // inside model.w
    writeFileSync(f, bytes);
    const err = await load(root, targets()).catch((e: unknown) => e);
    expect(isNcclNodeError(err, 'ERR_CHECKSUM')).toBe(true);
    expect((err as Error).message).toMatch(/rank-00000-of-00001\.safetensors, tensor model\.w: checksum mismatch/);
    expect((await verify(h2.dir)).problems.map((p) => p.tensor)).toEqual(['model.w']);
    const r = await load(root, targets(), { fallback: true });
    expect(r.step).toBe(1);
    expect(r.skipped[0]!.dir).toBe(h2.dir);
  });

  it('a step directory with a manifest but no commit marker is named when nothing committed is found', async () => {
    const root = tmp();
    const ck = await Checkpointer.create(root);
    const h = await ck.save(state(3));
    await h.committed;
    rmSync(join(h.dir, 'commit.json'));
    const err = await load(root, targets()).catch((e: unknown) => e);
    expect(isNcclNodeError(err, 'ERR_IO')).toBe(true);
    expect((err as Error).message).toMatch(/no committed checkpoint in .*\(step-0+3 has manifest\.json but no commit\.json: /);
  });

  it('a truncated shard is reported with its file and tensor', async () => {
    const root = tmp();
    const ck = await Checkpointer.create(root);
    const h = await ck.save(state(3));
    await h.committed;
    const f = join(h.dir, 'rank-00000-of-00001.safetensors');
    truncateSync(f, 500_000);
    const err = await load(root, targets()).catch((e: unknown) => e);
    expect((err as Error).message).toMatch(/rank-00000-of-00001\.safetensors, tensor model\.w: truncated/);
    expect((await verify(h.dir)).problems.length).toBeGreaterThan(0);
  });

  it('a step directory without its commit marker is not a checkpoint', async () => {
    const root = tmp();
    const ck = await Checkpointer.create(root);
    const h = await ck.save(state(4));
    await h.committed;
    rmSync(join(h.dir, 'commit.json'));
    expect(await latest(root)).toBeNull();
    expect((await listCheckpoints(root))[0]!.committed).toBe(false);
  });

  it('keeps the last k committed checkpoints', async () => {
    const root = tmp();
    const ck = await Checkpointer.create(root, { keep: 2 });
    for (let s = 1; s <= 4; s++) await (await ck.save(state(s, 1000))).committed;
    expect(readdirSync(root).sort()).toEqual(['step-0000000003', 'step-0000000004']);
  });

  it('a second save while one is in flight: queued (default) or refused', async () => {
    const root = tmp();
    const q = await Checkpointer.create(root, { keep: 0 });
    const a = await q.save(state(1));
    const b = await q.save(state(2)); // snapshot now, written after a commits
    expect(q.inFlight).toBe(2);
    const [ia, ib] = await Promise.all([a.committed, b.committed]);
    expect([ia.step, ib.step]).toEqual([1, 2]);
    expect((await load(root, targets())).step).toBe(2);

    const r = await Checkpointer.create(tmp(), { whenBusy: 'refuse' });
    const first = await r.save(state(1));
    const err = await r.save(state(2)).catch((e: unknown) => e);
    expect(isNcclNodeError(err, 'ERR_UNAVAILABLE')).toBe(true);
    await first.committed;
    await (await r.save(state(3))).committed; // free again once committed
  });

  it('the snapshot is isolated: changing the state after save() does not change the checkpoint', async () => {
    const root = tmp();
    const ck = await Checkpointer.create(root);
    const s = state(5);
    const h = await ck.save(s);
    s.tensors['model.w'].data.fill(0);
    await h.snapshotted; // already resolved without overlap
    await h.committed;
    const t = targets();
    await load(root, t);
    expect(sameBytes(t['model.w'].data, state(5).tensors['model.w'].data)).toBe(true);
  });

  it('an overlapped save returns before its snapshot is done and still captures the state at the call', async () => {
    const root = tmp();
    const ck = await Checkpointer.create(root);
    const s = state(7);
    const h = await ck.save(s, { async: true, overlap: true });
    // The large tensor's copy settles from a native thread, which takes an event-loop
    // turn: it cannot have finished yet, so save() did not wait for it.
    expect(await Promise.race([h.snapshotted.then(() => 'done'), Promise.resolve('pending')])).toBe('pending');
    // The caller's forward/backward would run here; the state changes only after snapshotted.
    await h.snapshotted;
    s.tensors['model.w'].data.fill(0);
    s.train.cursor = -1;
    const info = await h.committed;
    expect(info.step).toBe(7);
    const t = targets();
    const r = await load(root, t);
    const want = state(7);
    expect(sameBytes(t['model.w'].data, want.tensors['model.w'].data)).toBe(true);
    expect(sameBytes(t['model.bf'].data, want.tensors['model.bf'].data)).toBe(true);
    expect(r.train).toEqual(want.train);
  });

  it('the native parallel copy copies items of any size across thread boundaries, and checks sizes', async () => {
    // 9 MiB + odd sizes: more than one copy thread, and ranges that straddle items.
    const sizes = [3, (9 << 20) + 5, 1, (4 << 20) - 7, 0, 12345];
    const srcs = sizes.map((n, k) => new Uint8Array(n).map((_, i) => (i * 31 + k * 7) & 0xff));
    const dsts = sizes.map((n) => new Uint8Array(n + 2).fill(0xee));
    await io().ioCopy(dsts, srcs);
    srcs.forEach((src, k) => {
      expect(sameBytes(dsts[k]!.subarray(0, src.length), src), `item ${k}`).toBe(true);
      expect([...dsts[k]!.subarray(src.length)]).toEqual([0xee, 0xee]); // nothing past the source length
    });
    expect(() => io().ioCopy([new Uint8Array(2)], [new Uint8Array(3)])).toThrow(/destination 0 holds 2 bytes, its source 3/);
    expect(() => io().ioCopy([new Uint8Array(2)], [])).toThrow(/1 destinations for 0 sources/);
  });

  it('Young/Daly intervals reproduce the published figures', () => {
    expect(dalyInterval(5, 24 * 60)).toBeCloseTo(117, 0);
    expect(dalyInterval(5, 6 * 60)).toBeCloseTo(57, 0);
    expect(dalyInterval(5, 15)).toBeCloseTo(9.1, 1);
    expect(youngInterval(1, 3.1 * 60)).toBeCloseTo(19.3, 1);
    expect(dalyInterval(10, 4)).toBe(4);
    expect(checkpointEverySteps({ saveSeconds: 0.5, mtbfSeconds: 3600, stepSeconds: 1 })).toBe(Math.round(dalyInterval(0.5, 3600)));
  });
});
