// init() on 2 ranks with NVIDIA's real libnccl.so.2 (2.30.7) and no usable CUDA driver
// (no GPU here): the unique id the real ncclGetUniqueId makes crosses the store intact,
// every rank fails fast with a named error (no signal, no hang), and backend 'auto'
// falls back to Gloo saying why. The store is hosted here, as a launcher would, so it
// outlives the ranks and the test can read what rank 1 read.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { StoreClient } from '../../src/rendezvous/client.js';
import { StoreServer } from '../../src/rendezvous/server.js';
import { root, standinEnv } from '../gpu/helpers.js';
import { nvidiaReference } from './nvidia-reference.js';

const ref = nvidiaReference();
const TOKEN = 'real-init-token';
let server: StoreServer | undefined;
afterEach(async () => { await server?.close(); server = undefined; });

interface Rank { code: number | null; signal: string | null; result?: Record<string, any>; stderr: string; wallMs: number }

async function twoRanks(env: Record<string, string | undefined>): Promise<Rank[]> {
  server = await StoreServer.start({ host: '127.0.0.1', port: 0, token: TOKEN, log: () => {} });
  const port = server.port;
  return Promise.all([0, 1].map((rank) => new Promise<Rank>((resolve) => {
    const t0 = Date.now();
    const base = { ...process.env };
    for (const k of ['NCCL_NODE_LIBCUDA', 'NCCL_NODE_LIBNCCL', 'NCCL_NODE_LIBNVML', 'NCCL_NODE_ADDON']) delete base[k];
    const child = spawn(process.execPath, ['--import', 'tsx', join(root, 'test/real/worker.mts')], {
      env: {
        ...base, RANK: String(rank), WORLD_SIZE: '2', LOCAL_RANK: String(rank), LOCAL_WORLD_SIZE: '2',
        MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port), NCCL_NODE_TOKEN: TOKEN, NCCL_NODE_STORE_HOSTED: '1',
        NCCL_NODE_TIMEOUT_MS: '30000', ...env,
      } as NodeJS.ProcessEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '', err = '';
    child.stdout.on('data', (d: Buffer) => { out += d.toString(); });
    child.stderr.on('data', (d: Buffer) => { err += d.toString(); });
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      const line = out.split('\n').find((l) => l.startsWith('RESULT '));
      resolve({ code, signal, result: line ? JSON.parse(line.slice(7)) : undefined, stderr: err, wallMs: Date.now() - t0 });
    });
  })));
}

async function storedUniqueId(): Promise<Uint8Array> {
  const c = await StoreClient.connect({ host: '127.0.0.1', port: server!.port, token: TOKEN });
  try {
    return await c.get('nccl-node/nccl/world/ncclUniqueId', { timeoutMs: 1000 });
  } finally {
    await c.close();
  }
}

describe.skipIf(!ref)('init with the real libnccl and no CUDA driver', () => {
  it("backend 'nccl', no libcuda at all: every rank fails within seconds with ERR_UNAVAILABLE naming libcuda.so.1", async () => {
    const ranks = await twoRanks({ BACKEND: 'nccl', NCCL_NODE_LIBNCCL: ref!.libnccl, NCCL_NODE_LIBCUDA: '/nonexistent/libcuda.so.1' });
    for (const [i, r] of ranks.entries()) {
      expect(r.signal, r.stderr).toBeNull();
      expect(r.result, r.stderr).toMatchObject({ ok: false, code: 'ERR_UNAVAILABLE' });
      expect(r.result!.message).toContain(`init on rank ${i}: the nccl backend is unavailable: the CUDA driver (libcuda.so.1) could not be loaded`);
      expect(r.wallMs).toBeLessThan(20_000);
    }
  }, 90_000);

  it("backend 'nccl' with the stand-in driver: rank 0's real unique id reaches rank 1 through the store; both fail with ERR_NCCL", async () => {
    // NCCL's own CUDA runtime dlopens libcuda.so.1 by soname and gets the stand-in the addon
    // already loaded, which lacks the runtime's entry points: a CUDA error inside NCCL.
    const ranks = await twoRanks({ ...standinEnv(), NCCL_NODE_LIBNCCL: ref!.libnccl, BACKEND: 'nccl' });
    for (const [i, r] of ranks.entries()) {
      expect(r.signal, r.stderr).toBeNull();
      expect(r.result, r.stderr).toMatchObject({ ok: false, code: 'ERR_NCCL' });
      expect(r.result!.message).toMatch(new RegExp(`^init failed on rank ${i} of 2: ncclCommInitRankConfig: unhandled cuda error.*Cuda failure`));
      expect(r.wallMs).toBeLessThan(20_000);
    }
    // What rank 1 read: 128 bytes in NCCL's bootstrap handle layout (a 64-bit random magic,
    // then the root's socket address: AF_INET 127.0.0.1 or AF_INET6, and a port), not the stand-in's.
    const id = Buffer.from(await storedUniqueId());
    expect(id.length).toBe(128);
    expect(id.subarray(0, 11).toString('latin1')).not.toBe('NCCLSTANDIN');
    expect(id.readBigUInt64LE(0)).not.toBe(0n);
    const family = id.readUInt16LE(8);
    expect([2, 10]).toContain(family);
    expect(id.readUInt16BE(10)).toBeGreaterThan(0);  // sin_port, network order
    expect(id.subarray(40).every((b) => b === 0)).toBe(true);  // past the sockaddr: unused
  }, 90_000);

  it("backend 'auto' falls back to Gloo on every rank with a one-line warning saying why", async () => {
    const ranks = await twoRanks({ BACKEND: 'auto', NCCL_NODE_LIBNCCL: ref!.libnccl });
    for (const [i, r] of ranks.entries()) {
      expect(r.signal, r.stderr).toBeNull();
      expect(r.result, r.stderr).toMatchObject({ ok: true, backend: 'gloo' });
      const fallback = (r.result!.warnings as string[]).filter((w) => w.startsWith('NCCL_NODE_BACKEND_FALLBACK'));
      expect(fallback).toHaveLength(1);
      expect(fallback[0]).toMatch(new RegExp(`^NCCL_NODE_BACKEND_FALLBACK: init on rank ${i}: backend 'auto' uses Gloo: .*libcuda\\.so\\.1`));
      expect(fallback[0]).not.toContain('\n');
    }
  }, 90_000);
});
