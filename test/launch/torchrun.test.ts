/**
 * nccl-node under the real torchrun (torch's CPU wheel, in a venv made once by
 * torch-venv.ts): torchrun's agent holds MASTER_PORT with its own TCPStore, and init()
 * must find the job's store through it. torch.distributed's Gloo is the reference for
 * the sums, and torch's TCPStore server for the TCPStore client.
 */
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';

import { TcpStoreClient } from '../../src/rendezvous/tcpstore.js';
import { freePort } from '../helpers/ranks.js';
import { torchVenv, type TorchVenv } from './torch-venv.js';
import { runProcess } from '../helpers/cli.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const JOB = 'test/launch/fixtures/job.mts';
const TORCH_JOB = 'test/launch/fixtures/torch_allreduce.py';
const TSX = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
const SIZES = '1,7,1000,65537';

let venv: TorchVenv;

interface Done {
  code: number | null;
  out: string;
  err: string;
  reports: Array<Record<string, unknown>>;
}

/**
 * Runs a launcher; its ranks' reports come back through files (NCCL_NODE_TEST_REPORTS),
 * not the shared stdout, where two ranks' writes can interleave. A report that does not
 * parse is kept as { unparsed } so the assertions, not a throw in a callback, say so.
 */
async function exec(file: string, args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 120_000): Promise<Done> {
  const reportDir = mkdtempSync(path.join(os.tmpdir(), 'nccl-node-reports-'));
  const r = await runProcess(file, args, { NCCL_NODE_TEST_REPORTS: reportDir, ...env }, timeoutMs);
  const lines = readdirSync(reportDir).flatMap((f) => readFileSync(path.join(reportDir, f), 'utf8').split('\n').filter(Boolean));
  rmSync(reportDir, { recursive: true, force: true });
  const reports = lines.map((l): Record<string, unknown> => {
    try {
      return JSON.parse(l) as Record<string, unknown>;
    } catch {
      return { unparsed: l };
    }
  });
  return { ...r, reports };
}

/** torchrun [flags] node <job.mts> <args>: the job runs as torchrun's workers. */
function torchrunNode(flags: string[], args: string[]): Promise<Done> {
  return exec(venv.torchrun, ['--no-python', ...flags, 'node', '--import', TSX, JOB, ...args]);
}

function expectAllReduced(run: Done, size: number): string[] {
  expect({ code: run.code, err: run.code === 0 ? '' : run.err.slice(-3000) }).toEqual({ code: 0, err: '' });
  expect(run.reports.map((r) => r.rank).sort()).toEqual([...Array(size).keys()]);
  for (const r of run.reports) expect({ rank: r.rank, size: r.size, wrong: r.wrong }).toEqual({ rank: r.rank, size, wrong: 0 });
  const digests = run.reports[0]!.digests as string[];
  for (const r of run.reports) expect(r.digests).toEqual(digests);
  return digests;
}

beforeAll(async () => {
  venv = await torchVenv();
}, 20 * 60_000);

describe('under the real torchrun', { timeout: 180_000 }, () => {
  it('--standalone: init() shares the agent\'s store and all-reduces (bit-identical to torch\'s Gloo at 2 ranks)', async () => {
    const [ours, torch] = await Promise.all([
      torchrunNode(['--standalone', '--nproc-per-node', '2'], ['allreduce', SIZES]),
      exec(venv.torchrun, ['--standalone', '--nproc-per-node', '2', TORCH_JOB, SIZES]),
    ]);
    const digests = expectAllReduced(ours, 2);
    expect(torch.code).toBe(0);
    expect(torch.reports.map((r) => r.rank).sort()).toEqual([0, 1]);
    // Two addends: every correct float32 sum is the same bits, whatever the algorithm.
    for (const r of torch.reports) expect(r.digests).toEqual(digests);
  });

  it('with a static --master-port', async () => {
    const port = await freePort();
    const run = await torchrunNode(['--nnodes', '1', '--nproc-per-node', '2', '--master-addr', '127.0.0.1', '--master-port', String(port)], ['allreduce', SIZES]);
    expectAllReduced(run, 2);
    for (const r of run.reports) expect(r.masterPort).toBe(String(port));
  });

  it('nccl-node run gives a rank the variables torchrun documents, with the same values', async () => {
    // torchrun's documented worker environment (torch.distributed.run), less PYTHON_EXEC.
    const DOCUMENTED = ['LOCAL_RANK', 'RANK', 'GROUP_RANK', 'ROLE_RANK', 'ROLE_NAME', 'LOCAL_WORLD_SIZE', 'WORLD_SIZE', 'GROUP_WORLD_SIZE',
      'ROLE_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT', 'TORCHELASTIC_RESTART_COUNT', 'TORCHELASTIC_MAX_RESTARTS', 'TORCHELASTIC_RUN_ID'];
    const SAME_VALUE = ['LOCAL_RANK', 'RANK', 'GROUP_RANK', 'ROLE_RANK', 'ROLE_NAME', 'LOCAL_WORLD_SIZE', 'WORLD_SIZE', 'GROUP_WORLD_SIZE',
      'ROLE_WORLD_SIZE', 'TORCHELASTIC_RESTART_COUNT', 'TORCHELASTIC_MAX_RESTARTS', 'TORCHELASTIC_RUN_ID'];
    const envs = (run: Done): Array<Record<string, string>> =>
      run.reports.map((r) => r.env as Record<string, string>).sort((a, b) => Number(a.RANK) - Number(b.RANK));
    const [theirs, ours] = await Promise.all([
      exec(venv.torchrun, ['--no-python', '--nproc-per-node', '3', '--rdzv-id', 'cmp', '--master-port', String(await freePort()), 'node', 'test/launch/fixtures/env.mjs']),
      exec(process.execPath, ['bin/nccl-node.js', 'run', '--nproc-per-node', '3', '--rdzv-id', 'cmp', 'test/launch/fixtures/env.mjs']),
    ]);
    expect([theirs.code, ours.code]).toEqual([0, 0]);
    const t = envs(theirs);
    const o = envs(ours);
    expect(o).toHaveLength(3);
    for (const [i, e] of t.entries()) {
      expect(DOCUMENTED.filter((k) => e[k] === undefined)).toEqual([]);
      expect(DOCUMENTED.filter((k) => o[i]![k] === undefined)).toEqual([]);
      expect(Object.fromEntries(SAME_VALUE.map((k) => [k, o[i]![k]]))).toEqual(Object.fromEntries(SAME_VALUE.map((k) => [k, e[k]])));
    }
  });

  it('two --standalone jobs at once on one host do not clash', async () => {
    const runs = await Promise.all([
      torchrunNode(['--standalone', '--nproc-per-node', '2'], ['allreduce', SIZES]),
      torchrunNode(['--standalone', '--nproc-per-node', '3'], ['allreduce', SIZES]),
    ]);
    expectAllReduced(runs[0]!, 2);
    expectAllReduced(runs[1]!, 3);
  });
});

/** A torch TCPStore server in Python that trades keys with our client. */
const TCPSTORE_PEER = `
import sys
from datetime import timedelta
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", 0, is_master=True, use_libuv=sys.argv[1] == "1", timeout=timedelta(seconds=30))
store.set("from-python", b"hello \\x00\\xff")
print(store.port, flush=True)
print("got", store.get("from-node").decode(), flush=True)
print("counter", store.add("counter", 0), flush=True)
store.set("done", "1")
store.wait(["bye"])
`;

describe('TcpStoreClient against torch\'s TCPStore', { timeout: 60_000 }, () => {
  for (const libuv of [true, false]) {
    it(`sets, gets, adds, checks and waits (${libuv ? 'libuv' : 'classic'} server)`, async () => {
      const py = spawn(venv.python, ['-c', TCPSTORE_PEER, libuv ? '1' : '0'], { stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      py.stdout.on('data', (d: Buffer) => (out += d.toString()));
      py.stderr.on('data', (d: Buffer) => (err += d.toString()));
      const exited = new Promise<number | null>((r) => py.on('close', (code) => r(code)));
      try {
        const deadline = Date.now() + 30_000;
        while (!/^\d+\n/.test(out) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
        const port = Number(out.split('\n')[0]);
        expect(port, err).toBeGreaterThan(0);
        const c = await TcpStoreClient.connect({ host: '127.0.0.1', port });
        expect(await c.get('from-python', 5000)).toEqual(Buffer.from('hello \x00\xff', 'latin1'));
        expect(await c.check(['from-python'])).toBe(true);
        expect(await c.check(['from-python', 'absent'])).toBe(false);
        expect(await c.add('counter', 40)).toBe(40n);
        expect(await c.add('counter', 2n)).toBe(42n);
        await c.set('from-node', 'world');
        await c.wait(['done'], 10_000);
        const timedOut = await c.wait(['never'], 200).then(() => undefined, (e: unknown) => e as { code: string; message: string });
        expect(timedOut?.code).toBe('ERR_TIMEOUT');
        expect(timedOut?.message).toContain('"never"');
        const c2 = await TcpStoreClient.connect({ host: '127.0.0.1', port });
        await c2.set('bye', '');
        await c2.check(['bye']);
        c2.close();
        expect(await exited).toBe(0);
        expect(out).toContain('got world\n');
        expect(out).toContain('counter 42\n');
      } finally {
        py.kill('SIGKILL');
      }
    });
  }
});
