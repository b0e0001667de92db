/**
 * Elastic gangs: several `nccl-node run` launchers on 127.0.0.1 stand in for nodes that
 * meet through the store at one --rdzv-endpoint (the first to bind it hosts the store).
 * Expectations are computed from the scenario: node ranks in join order, WORLD_SIZE the
 * sum of the members' --nproc-per-node, a late node waiting as a spare until a failure
 * re-forms the gang, and named errors (never a hang) when too few nodes come or the
 * store is lost. Every launcher and rank started here is SIGKILLed after each test.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import { torchVenv, type TorchVenv } from './torch-venv.js';
import { freePort } from '../helpers/ranks.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.join(ROOT, 'bin/nccl-node.js');
const FIXTURE = 'test/launch/fixtures/elastic-rank.mjs';

interface Report {
  t: number;
  pid: number;
  RANK: string;
  WORLD_SIZE: string;
  GROUP_RANK: string;
  GROUP_WORLD_SIZE: string;
  TORCHELASTIC_RESTART_COUNT: string;
  NODE_TAG: string;
}

interface Node {
  child: ChildProcess;
  stderr: () => string;
  done: Promise<{ code: number | null; signal: NodeJS.Signals | null; ms: number }>;
}

const launchers: ChildProcess[] = [];
let reports: string;

function readReports(): Report[] {
  return readdirSync(reports).flatMap((f) => readFileSync(path.join(reports, f), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Report));
}

function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // Already gone.
  }
}

beforeEach(() => {
  reports = mkdtempSync(path.join(os.tmpdir(), 'nccl-node-elastic-'));
});

afterEach(() => {
  for (const c of launchers.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  for (const r of readReports()) killQuietly(r.pid);
  rmSync(reports, { recursive: true, force: true });
});

/** One node: a launcher whose ranks tag their reports with `tag` (torchrun's agent when `torchrun` is given). */
function node(tag: string, args: string[], env: NodeJS.ProcessEnv = {}, torchrun?: string): Node {
  const t0 = Date.now();
  const [file, argv] = torchrun === undefined ? [process.execPath, [BIN, 'run', ...args, FIXTURE]] : [torchrun, ['--no-python', ...args, 'node', FIXTURE]];
  const child = spawn(file, argv, {
    cwd: ROOT,
    env: { ...process.env, NCCL_NODE_TOKEN: 'elastic-test-token', ELASTIC_REPORTS: reports, ELASTIC_NODE_TAG: tag, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  launchers.push(child);
  let err = '';
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null; ms: number }>((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 45_000);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, ms: Date.now() - t0 });
    });
  });
  return { child, stderr: () => err, done };
}

async function waitFor(what: string, ok: () => boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Until something listens on the port: the first launcher hosts the store there. */
async function listening(port: number): Promise<void> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = net.connect({ host: '127.0.0.1', port }, () => {
        s.destroy();
        resolve(true);
      });
      s.on('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`nothing listens on ${port}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** What each rank of one attempt saw, by rank. */
function attempt(list: Report[], k: number): Array<[string, string, string, string, string]> {
  return list.filter((r) => r.TORCHELASTIC_RESTART_COUNT === String(k)).sort((a, b) => Number(a.RANK) - Number(b.RANK))
    .map((r) => [r.NODE_TAG, r.RANK, r.WORLD_SIZE, r.GROUP_RANK, r.GROUP_WORLD_SIZE]);
}

describe('elastic --nnodes MIN:MAX', { timeout: 60_000 }, () => {
  it('forms a gang of the nodes that came, keeps a late node as a spare, and replaces a lost node with it', async () => {
    const port = await freePort();
    const flags = ['--nnodes', '1:3', '--nproc-per-node', '2', '--rdzv-endpoint', `127.0.0.1:${port}`, '--rdzv-last-call', '3',
      '--join-timeout', '20', '--max-restarts', '1', '--grace-period', '1'];
    // Attempt 0 holds its ranks until the test kills node B; attempt 1 finishes at once.
    const env = { ELASTIC_HOLD_MS: '0:60000' };
    const a = node('A', flags, env);
    await listening(port);
    const b = node('B', flags, env);
    await waitFor('attempt 0 on both nodes', () => readReports().length === 4);
    expect(attempt(readReports(), 0)).toEqual([
      ['A', '0', '4', '0', '2'], ['A', '1', '4', '0', '2'], ['B', '2', '4', '1', '2'], ['B', '3', '4', '1', '2'],
    ]);

    const c = node('C', flags, env);
    await waitFor('C to wait as a spare', () => /waits as a spare for the next round/.test(a.stderr()));
    expect(readReports().filter((r) => r.NODE_TAG === 'C')).toEqual([]);

    // Node B goes away: its launcher and its ranks, all at once.
    b.child.kill('SIGKILL');
    for (const r of readReports()) if (r.NODE_TAG === 'B') killQuietly(r.pid);
    const [endA, endC] = await Promise.all([a.done, c.done]);
    expect({ a: endA.code, c: endC.code, err: endA.code === 0 && endC.code === 0 ? '' : a.stderr() + c.stderr() }).toEqual({ a: 0, c: 0, err: '' });
    expect(attempt(readReports(), 1)).toEqual([
      ['A', '0', '4', '0', '2'], ['A', '1', '4', '0', '2'], ['C', '2', '4', '1', '2'], ['C', '3', '4', '1', '2'],
    ]);
    expect(a.stderr()).toMatch(/attempt 0 failed: the launcher of node 1 is gone/);
  });

  it('grows a gang below MAX with a spare at the next re-form (scale-up after a failed rank)', async () => {
    const port = await freePort();
    const flags = ['--nnodes', '1:3', '--nproc-per-node', '1', '--rdzv-endpoint', `127.0.0.1:${port}`, '--rdzv-last-call', '0.5',
      '--join-timeout', '20', '--max-restarts', '1', '--grace-period', '1'];
    // Attempt 0 runs on A alone and holds until B waits as a spare; then A's rank is SIGKILLed.
    const a = node('A', flags, { ELASTIC_HOLD_MS: '0:60000' });
    await waitFor('attempt 0 on A', () => readReports().length === 1);
    const b = node('B', flags, { ELASTIC_HOLD_MS: '0:60000' });
    await waitFor('B to wait as a spare', () => /waits as a spare for the next round/.test(a.stderr()));
    killQuietly(readReports()[0]!.pid);
    const [endA, endB] = await Promise.all([a.done, b.done]);
    expect({ a: endA.code, b: endB.code, err: endA.code === 0 && endB.code === 0 ? '' : a.stderr() + b.stderr() }).toEqual({ a: 0, b: 0, err: '' });
    expect(attempt(readReports(), 0)).toEqual([['A', '0', '1', '0', '1']]);
    expect(attempt(readReports(), 1)).toEqual([['A', '0', '2', '0', '2'], ['B', '1', '2', '1', '2']]);
  });

  it('fails with ERR_TIMEOUT naming MIN and the count when too few nodes come', async () => {
    const port = await freePort();
    const a = node('A', ['--nnodes', '2:3', '--nproc-per-node', '1', '--rdzv-endpoint', `127.0.0.1:${port}`, '--rdzv-last-call', '1', '--join-timeout', '2']);
    const end = await a.done;
    expect(end.code).toBe(1);
    expect(end.ms).toBeLessThan(10_000);
    expect(a.stderr()).toMatch(/error \[ERR_TIMEOUT\]: rendezvous for attempt 0 failed: 1 node\(s\) came within the join timeout of 2 s; --nnodes 2:3 needs at least 2/);
    expect(readReports()).toEqual([]);
  });

  it('fails with ERR_TIMEOUT when a lost node leaves fewer than MIN for the next round', async () => {
    const port = await freePort();
    const flags = ['--nnodes', '2:3', '--nproc-per-node', '1', '--rdzv-endpoint', `127.0.0.1:${port}`, '--rdzv-last-call', '1',
      '--join-timeout', '3', '--max-restarts', '2', '--grace-period', '1'];
    const a = node('A', flags, { ELASTIC_HOLD_MS: '0:60000' });
    await listening(port);
    const b = node('B', flags, { ELASTIC_HOLD_MS: '0:60000' });
    await waitFor('attempt 0 on both nodes', () => readReports().length === 2);
    const killedAt = Date.now();
    b.child.kill('SIGKILL');
    for (const r of readReports()) if (r.NODE_TAG === 'B') killQuietly(r.pid);
    const end = await a.done;
    expect(end.code).toBe(1);
    // Noticing the loss, stopping A's rank (grace 1 s) and the 3 s round: well under 10 s.
    expect(Date.now() - killedAt).toBeLessThan(10_000);
    expect(a.stderr()).toMatch(/error \[ERR_TIMEOUT\]: rendezvous for attempt 1 failed: 1 node\(s\) came within the join timeout of 3 s; --nnodes 2:3 needs at least 2/);
    expect(attempt(readReports(), 1)).toEqual([]);
  });

  it('a launcher that loses the store exits with ERR_STORE and stops its ranks', async () => {
    const port = await freePort();
    const flags = ['--nnodes', '2:2', '--nproc-per-node', '1', '--rdzv-endpoint', `127.0.0.1:${port}`, '--join-timeout', '10', '--grace-period', '1'];
    const a = node('A', flags, { ELASTIC_HOLD_MS: '0:60000' });
    await listening(port);
    const b = node('B', flags, { ELASTIC_HOLD_MS: '0:60000' });
    await waitFor('attempt 0 on both nodes', () => readReports().length === 2);
    const killedAt = Date.now();
    a.child.kill('SIGKILL');
    for (const r of readReports()) if (r.NODE_TAG === 'A') killQuietly(r.pid);
    const end = await b.done;
    expect(end.code).toBe(1);
    expect(Date.now() - killedAt).toBeLessThan(8_000);
    expect(b.stderr()).toMatch(/error \[ERR_STORE\]: lost the job's store at 127\.0\.0\.1:\d+/);
    const bRank = readReports().find((r) => r.NODE_TAG === 'B')!;
    await waitFor('B\'s rank to be gone', () => {
      try {
        process.kill(bRank.pid, 0);
        return false;
      } catch {
        return true;
      }
    }, 3_000);
  });
});

describe('elastic rounds against torchrun\'s c10d rendezvous', { timeout: 60_000 }, () => {
  let venv: TorchVenv;
  beforeAll(async () => {
    venv = await torchVenv();
  }, 20 * 60_000);

  /** Per node, sorted: the variables its ranks saw; node tags are dropped (the two rendezvous may number the nodes differently). */
  function shape(list: Report[]): string[][] {
    const byNode = new Map<string, Report[]>();
    for (const r of list) byNode.set(r.NODE_TAG, [...(byNode.get(r.NODE_TAG) ?? []), r]);
    return [...byNode.values()].map((rs) => rs.sort((a, b) => Number(a.RANK) - Number(b.RANK))
      .map((r) => `RANK=${r.RANK} WORLD_SIZE=${r.WORLD_SIZE} GROUP_RANK=${r.GROUP_RANK} GROUP_WORLD_SIZE=${r.GROUP_WORLD_SIZE} RESTART=${r.TORCHELASTIC_RESTART_COUNT}`))
      .sort((a, b) => a[0]!.localeCompare(b[0]!));
  }

  async function twoNodes(torchrun: string | undefined): Promise<{ codes: Array<number | null>; shape: string[][] }> {
    const port = await freePort();
    const endpoint = ['--nnodes', '1:3', '--nproc-per-node', '2', '--rdzv-endpoint', `127.0.0.1:${port}`, '--max-restarts', '1'];
    const flags = torchrun === undefined
      ? [...endpoint, '--rdzv-last-call', '4', '--join-timeout', '30']
      : [...endpoint, '--rdzv-backend', 'c10d', '--rdzv-id', 'cmp', '--rdzv-conf', 'last_call_timeout=4,join_timeout=30'];
    const a = node('A', flags, {}, torchrun);
    const b = node('B', flags, {}, torchrun);
    const ends = await Promise.all([a.done, b.done]);
    const all = readReports();
    rmSync(reports, { recursive: true, force: true });
    reports = mkdtempSync(path.join(os.tmpdir(), 'nccl-node-elastic-'));
    return { codes: ends.map((e) => e.code), shape: shape(all) };
  }

  it('two nodes joining within the last call form one gang: the same world size, node ranks and restart count', async () => {
    const theirs = await twoNodes(venv.torchrun);
    const ours = await twoNodes(undefined);
    expect(theirs.codes).toEqual([0, 0]);
    expect(theirs.shape).toEqual([
      ['RANK=0 WORLD_SIZE=4 GROUP_RANK=0 GROUP_WORLD_SIZE=2 RESTART=0', 'RANK=1 WORLD_SIZE=4 GROUP_RANK=0 GROUP_WORLD_SIZE=2 RESTART=0'],
      ['RANK=2 WORLD_SIZE=4 GROUP_RANK=1 GROUP_WORLD_SIZE=2 RESTART=0', 'RANK=3 WORLD_SIZE=4 GROUP_RANK=1 GROUP_WORLD_SIZE=2 RESTART=0'],
    ]);
    expect(ours).toEqual(theirs);
  });

  it('too few nodes: torchrun and nccl-node run both fail within the join timeout', async () => {
    const port = await freePort();
    const t0 = Date.now();
    const theirs = node('T', ['--nnodes', '2:3', '--nproc-per-node', '1', '--rdzv-backend', 'c10d', '--rdzv-endpoint', `127.0.0.1:${port}`,
      '--rdzv-id', 'few', '--rdzv-conf', 'join_timeout=3'], {}, venv.torchrun);
    const ours = node('O', ['--nnodes', '2:3', '--nproc-per-node', '1', '--rdzv-endpoint', `127.0.0.1:${await freePort()}`, '--join-timeout', '3']);
    const [t, o] = await Promise.all([theirs.done, ours.done]);
    expect(t.code).not.toBe(0);
    expect(theirs.stderr()).toMatch(/RendezvousTimeoutError/);
    expect(o.code).toBe(1);
    expect(Date.now() - t0).toBeLessThan(30_000);
    expect(readReports()).toEqual([]);
  });
});
