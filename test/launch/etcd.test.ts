/**
 * The etcd rendezvous (`--rdzv-backend etcd`) against a real etcd server (Debian's
 * etcd-server, started per file on free ports with a temporary data directory). Two
 * `nccl-node run` launchers on 127.0.0.1 stand in for two nodes of 2 Gloo ranks each.
 * Expectations are computed: the all-reduce of [rank + 1] is the sum 1..WORLD_SIZE;
 * node ranks follow the join order; a lost node (killed, or its lease expired) is absent
 * from the next round; the keys the job leaves in etcd are read back with the etcd3
 * client. Every launcher and rank started here is SIGKILLed after each test.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Etcd3 } from 'etcd3';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import { startEtcd, type EtcdServer } from '../helpers/etcd.js';
import { freePort } from '../helpers/ranks.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.join(ROOT, 'bin/nccl-node.js');
const FIXTURE = 'test/launch/fixtures/etcd-gloo.mts';

interface Report {
  pid: number;
  tag: string;
  attempt: number;
  rank: number;
  world: number;
  node: number;
  sum: number;
  store: string;
}

interface Node {
  child: ChildProcess;
  stderr: () => string;
  done: Promise<{ code: number | null; ms: number }>;
}

let etcd: EtcdServer;
let reports: string;
const launchers: ChildProcess[] = [];

function readReports(): Report[] {
  return readdirSync(reports).flatMap((f) => readFileSync(path.join(reports, f), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as Report));
}

function killQuietly(pid: number, signal: NodeJS.Signals = 'SIGKILL'): void {
  try {
    process.kill(pid, signal);
  } catch {
    // Already gone.
  }
}

beforeAll(async () => {
  etcd = await startEtcd();
}, 60_000);

afterAll(async () => {
  await etcd?.stop();
});

beforeEach(() => {
  reports = mkdtempSync(path.join(os.tmpdir(), 'nccl-node-etcd-reports-'));
});

afterEach(() => {
  for (const c of launchers.splice(0)) {
    killQuietly(c.pid!, 'SIGCONT');
    if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  }
  for (const r of readReports()) killQuietly(r.pid);
  rmSync(reports, { recursive: true, force: true });
});

function node(tag: string, args: string[], env: NodeJS.ProcessEnv = {}): Node {
  const t0 = Date.now();
  const child = spawn(process.execPath, [BIN, 'run', '--rdzv-backend', 'etcd', ...args, FIXTURE], {
    cwd: ROOT,
    env: { ...process.env, NCCL_NODE_TOKEN: 'etcd-test-token', ETCD_REPORTS: reports, NODE_TAG: tag, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  launchers.push(child);
  let err = '';
  child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const done = new Promise<{ code: number | null; ms: number }>((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 45_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, ms: Date.now() - t0 });
    });
  });
  return { child, stderr: () => err, done };
}

async function waitFor(what: string, ok: () => boolean, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** [tag, rank, world, node rank, sum] per rank of one attempt. */
function attempt(k: number): Array<[string, number, number, number, number]> {
  return readReports().filter((r) => r.attempt === k).sort((a, b) => a.rank - b.rank).map((r) => [r.tag, r.rank, r.world, r.node, r.sum]);
}

async function waitForKey(key: string): Promise<void> {
  const client = new Etcd3({ hosts: etcd.url });
  try {
    await waitForAsync(`etcd key ${key}`, async () => (await client.get(key).string()) !== null);
  } finally {
    client.close();
  }
}

async function waitForAsync(what: string, ok: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Every key in etcd, with its lease (0: none). */
async function etcdKeys(): Promise<Array<{ key: string; lease: string }>> {
  const client = new Etcd3({ hosts: etcd.url });
  try {
    const all = await client.getAll().prefix('').exec();
    return all.kvs.map((kv) => ({ key: kv.key.toString(), lease: kv.lease }));
  } finally {
    client.close();
  }
}

const flags = (id: string, nnodes: string, extra: string[] = []): string[] => [
  '--nnodes', nnodes, '--nproc-per-node', '2', '--rdzv-endpoint', etcd.endpoint, '--rdzv-id', id,
  '--rdzv-last-call', '1', '--join-timeout', '20', '--grace-period', '1', ...extra,
];

describe('nccl-node run --rdzv-backend etcd', { timeout: 60_000 }, () => {
  it('two nodes rendezvous through etcd, all-reduce through the store node 0 hosts, and leave only the leased end record', async () => {
    const a = node('A', flags('job-ok', '2:2'));
    const b = node('B', flags('job-ok', '2:2'));
    const [endA, endB] = await Promise.all([a.done, b.done]);
    expect({ a: endA.code, b: endB.code, err: endA.code === 0 && endB.code === 0 ? '' : a.stderr() + b.stderr() }).toEqual({ a: 0, b: 0, err: '' });
    const ranks = attempt(0);
    const first = ranks[0]![0];
    const second = first === 'A' ? 'B' : 'A';
    // 1 + 2 + 3 + 4 on every rank; node ranks in join order.
    expect(ranks).toEqual([[first, 0, 4, 0, 10], [first, 1, 4, 0, 10], [second, 2, 4, 1, 10], [second, 3, 4, 1, 10]]);
    // Every rank found the store that node 0's launcher hosted for the attempt (not the etcd port).
    const stores = new Set(readReports().map((r) => r.store));
    expect(stores.size).toBe(1);
    expect([...stores][0]).not.toBe(etcd.endpoint);
    // Heartbeats, leader, arrivals, tickets and the store address went with the launchers' leases:
    // only the job's end remains, under the job's prefix and under a lease of its own.
    const keys = await etcdKeys();
    expect(keys.map((k) => k.key)).toEqual(['/nccl-node/job-ok/nccl-node/rdzv/closed']);
    expect(keys[0]!.lease).not.toBe('0');
  });

  it('a node whose ranks all exited 0 ends 0, and stops nothing as failed, when node 0 finishes and leaves while it still reaps', async () => {
    // A leads, so A is node 0 and hosts the store. Every rank leaves a shell that outlives
    // SIGTERM (logging each), so each launcher reaps for its grace period after its ranks
    // exited 0: A for 3 s once every done key is in, B for 8 s. B is stopped while A reaps
    // and continued once A has revoked its lease and closed the store: B then sees node 0's
    // lease gone and the store unreachable, with its own ranks' work done.
    const log = path.join(reports, '..', `${path.basename(reports)}.linger`);
    const env = { ETCD_LINGER_LOG: log };
    const a = node('A', flags('job-late-reap', '2:2', ['--grace-period', '3']), env);
    await waitForKey('/nccl-node/job-late-reap/leader');
    const b = node('B', flags('job-late-reap', '2:2', ['--grace-period', '8']), env);
    try {
      await waitFor('attempt 0 on both nodes', () => attempt(0).length === 4);
      expect(attempt(0)).toEqual([['A', 0, 4, 0, 10], ['A', 1, 4, 0, 10], ['B', 2, 4, 1, 10], ['B', 3, 4, 1, 10]]);
      const alive = (pid: number): boolean => {
        try {
          process.kill(pid, 0);
          return true;
        } catch {
          return false;
        }
      };
      await waitFor('B\'s ranks to exit', () => readReports().filter((r) => r.tag === 'B').every((r) => !alive(r.pid)));
      await new Promise((r) => setTimeout(r, 500)); // their done keys reach A's store
      b.child.kill('SIGSTOP');
      // Were they not in yet, A would wait for them: B goes on after 15 s regardless.
      await Promise.race([a.done, new Promise((r) => setTimeout(r, 15_000))]);
      b.child.kill('SIGCONT');
      const endA = await a.done;
      const endB = await b.done;
      expect({ a: endA.code, b: endB.code, err: endA.code === 0 && endB.code === 0 ? '' : a.stderr() + b.stderr() }).toEqual({ a: 0, b: 0, err: '' });
      // One SIGTERM per leftover shell, from its launcher's clean end: a node-lost failure
      // would have stopped B's groups a second time.
      const terms = readFileSync(log, 'utf8').split('\n').filter(Boolean).map((l) => l.split(' ')[0]).sort();
      expect(terms).toEqual(['A', 'A', 'B', 'B']);
    } finally {
      rmSync(log, { force: true });
    }
  });

  it('losing the node that hosts the attempt\'s store re-forms the gang with another host, which completes', async () => {
    // A longer last call than B takes to start: attempt 0 waits for B.
    const extra = ['--max-restarts', '1', '--rdzv-last-call', '4'];
    const env = { ETCD_HOLD_MS: '60000' };
    const a = node('A', flags('job-host-lost', '1:2', extra), env);
    // A leads the rounds before B comes, so A joins first: node rank 0, the store's host.
    await waitForKey('/nccl-node/job-host-lost/leader');
    const b = node('B', flags('job-host-lost', '1:2', extra), env);
    await waitFor('attempt 0 on both nodes', () => attempt(0).length === 4);
    expect(attempt(0)).toEqual([['A', 0, 4, 0, 10], ['A', 1, 4, 0, 10], ['B', 2, 4, 1, 10], ['B', 3, 4, 1, 10]]);
    expect(a.stderr()).toMatch(/rendezvous: attempt 0 formed with 2 node\(s\)/);
    const hostTag = 'A';
    const [host, survivor] = [a, b];
    const oldStore = readReports()[0]!.store;
    const killedAt = Date.now();
    host.child.kill('SIGKILL');
    for (const r of readReports()) if (r.tag === hostTag) killQuietly(r.pid);
    const end = await survivor.done;
    const ms = Date.now() - killedAt;
    expect({ code: end.code, err: end.code === 0 ? '' : survivor.stderr() }).toEqual({ code: 0, err: '' });
    const other = hostTag === 'A' ? 'B' : 'A';
    // Attempt 1: the survivor alone, node rank 0, hosting a new store; 1 + 2.
    expect(attempt(1)).toEqual([[other, 0, 2, 0, 3], [other, 1, 2, 0, 3]]);
    expect(readReports().find((r) => r.attempt === 1)!.store).not.toBe(oldStore);
    expect(survivor.stderr()).toMatch(/attempt 0 failed: (lost the attempt's store .* hosted by node 0|the launcher of node 0 is gone)/);
    // B took over the rounds when A's leader key went with A's lease.
    expect(survivor.stderr()).toMatch(/rendezvous: attempt 1 formed with 1 node\(s\)/);
    // The lease TTL (10 s) bounds how long the next round waits for the lost leader.
    expect(ms).toBeLessThan(25_000);
  });

  it('a node whose lease expires is dropped from the next round, and exits with ERR_STORE when it wakes', async () => {
    const extra = ['--max-restarts', '1', '--rdzv-lease-ttl', '2'];
    const env = { ETCD_HOLD_MS: '60000' };
    const a = node('A', flags('job-lease', '1:2', extra), env);
    const b = node('B', flags('job-lease', '1:2', extra), env);
    await waitFor('attempt 0 on both nodes', () => attempt(0).length === 4);
    const hostTag = attempt(0)[0]![0];
    const [host, sleeper] = hostTag === 'A' ? [a, b] : [b, a];
    // The launcher of node 1 stops answering (its ranks keep running): its lease runs out.
    sleeper.child.kill('SIGSTOP');
    const end = await host.done;
    expect({ code: end.code, err: end.code === 0 ? '' : host.stderr() }).toEqual({ code: 0, err: '' });
    expect(host.stderr()).toMatch(/attempt 0 failed: the launcher of node 1 is gone \(its etcd lease expired\)/);
    expect(attempt(1)).toEqual([[hostTag, 0, 2, 0, 3], [hostTag, 1, 2, 0, 3]]);
    sleeper.child.kill('SIGCONT');
    const woke = await sleeper.done;
    expect(woke.code).toBe(1);
    expect(sleeper.stderr()).toMatch(/error \[ERR_STORE\]: .*lease/);
  });

  it('an etcd endpoint that refuses connections fails with ERR_STORE within a bounded time', async () => {
    const port = await freePort();
    const a = node('A', ['--nnodes', '1:2', '--nproc-per-node', '1', '--rdzv-endpoint', `127.0.0.1:${port}`, '--rdzv-id', 'job-bad', '--join-timeout', '3']);
    const end = await a.done;
    expect(end.code).toBe(1);
    expect(a.stderr()).toMatch(new RegExp(`error \\[ERR_STORE\\]: cannot reach etcd at 127\\.0\\.0\\.1:${port} \\(--rdzv-endpoint\\)`));
    expect(end.ms).toBeLessThan(10_000);
    expect(readReports()).toEqual([]);
  });

  it('an etcd endpoint that accepts connections but never answers fails with ERR_STORE after min(--join-timeout, 10 s)', async () => {
    const held: net.Socket[] = [];
    const silent = net.createServer((socket) => void held.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const port = (silent.address() as net.AddressInfo).port;
    try {
      const a = node('A', ['--nnodes', '1:2', '--nproc-per-node', '1', '--rdzv-endpoint', `127.0.0.1:${port}`, '--rdzv-id', 'job-silent', '--join-timeout', '3']);
      const end = await a.done;
      expect(end.code).toBe(1);
      expect(a.stderr()).toMatch(new RegExp(`error \\[ERR_STORE\\]: cannot reach etcd at 127\\.0\\.0\\.1:${port} \\(--rdzv-endpoint\\)`));
      // The 3 s deadline plus the launcher's start-up.
      expect(end.ms).toBeGreaterThan(3_000);
      expect(end.ms).toBeLessThan(12_000);
    } finally {
      for (const s of held) s.destroy();
      silent.close();
    }
  });

  it('--rdzv-backend etcd without --rdzv-endpoint is a usage error', async () => {
    const a = node('A', ['--nnodes', '1:2', '--nproc-per-node', '1']);
    const end = await a.done;
    expect(end.code).toBe(2);
    expect(a.stderr()).toMatch(/--rdzv-backend etcd needs --rdzv-endpoint HOST:PORT/);
  });
});
