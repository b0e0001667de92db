/**
 * End-to-end tests of `nccl-node run`: the real CLI (bin/nccl-node.js) starting
 * small fixture ranks (test/fixtures/launch-*.{ts,mjs}) that join like init() does.
 * The machine may have two cores, so jobs are small and every wait is bounded.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/ranks.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.join(ROOT, 'bin/nccl-node.js');
const RANK_TS = 'test/fixtures/launch-rank.ts';
const PLAIN_MJS = 'test/fixtures/launch-plain.mjs';

interface Run {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  done: Promise<{ code: number | null; signal: NodeJS.Signals | null; ms: number }>;
}

const started: ChildProcess[] = [];

function cli(args: string[], env: NodeJS.ProcessEnv = {}, hardTimeoutMs = 45_000): Run {
  const t0 = Date.now();
  const child = spawn(process.execPath, [BIN, ...args], {
    cwd: ROOT,
    env: { ...process.env, NCCL_NODE_TOKEN: undefined, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  started.push(child);
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const done = new Promise<{ code: number | null; signal: NodeJS.Signals | null; ms: number }>((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), hardTimeoutMs);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, ms: Date.now() - t0 });
    });
  });
  return { child, stdout: () => out, stderr: () => err, done };
}

afterEach(() => {
  // A failed assertion must not leave a launcher behind (its ranks follow it via the orphan guard).
  for (const c of started.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

/** rank -> pid, from the "pid=N rank=R" lines the fixtures print. */
function pidsOf(output: string): Map<number, number> {
  const pids = new Map<number, number>();
  for (const m of output.matchAll(/pid=(\d+) rank=(\d+)/g)) pids.set(Number(m[2]), Number(m[1]));
  return pids;
}

/** A zombie (reparented to an init that has not reaped it yet) counts as dead. */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

async function expectAllDead(pids: Iterable<number>, withinMs = 0): Promise<void> {
  const list = [...pids];
  const deadline = Date.now() + withinMs;
  while (list.some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  expect(list.filter(alive)).toEqual([]);
}

function lastLine(text: string): string {
  const lines = text.trimEnd().split('\n');
  return lines[lines.length - 1] ?? '';
}

async function waitFor(cond: () => boolean, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * A TCP proxy to 127.0.0.1:`target` that forwards both ways, except that once a
 * client sends bytes containing `marker`, that connection's replies are dropped
 * (the request itself goes through). `held()` counts such connections.
 */
async function holdingProxy(target: number, marker: Buffer): Promise<{ port: number; held: () => number; close: () => void }> {
  let held = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(target, '127.0.0.1');
    sockets.add(client).add(upstream);
    let holding = false;
    client.on('data', (d: Buffer) => {
      if (!holding && d.includes(marker)) {
        holding = true;
        held++;
      }
      upstream.write(d);
    });
    upstream.on('data', (d: Buffer) => {
      if (!holding) client.write(d);
    });
    const end = (): void => {
      client.destroy();
      upstream.destroy();
    };
    for (const s of [client, upstream]) s.on('close', end).on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    held: () => held,
    close: () => {
      server.close();
      for (const s of sockets) s.destroy();
    },
  };
}

const base = ['run', '--master-port', '0'];

describe('nccl-node run', { timeout: 60_000 }, () => {
  it('runs 4 ranks of a .ts script with --prefix: prefixed, whole-line output', async () => {
    const run = cli([...base, '--prefix', '--nproc-per-node', '4', RANK_TS, 'ok']);
    const { code } = await run.done;
    expect(run.stderr()).not.toMatch(/nccl-node run:/);
    expect(code).toBe(0);
    const out = run.stdout();
    for (const line of out.trimEnd().split('\n')) expect(line).toMatch(/^\[[0-3]\] (pid=\d+ rank=\d|hello from rank \d of 4)$/);
    for (let r = 0; r < 4; r++) {
      // The last write had no newline; the launcher completes the line at exit.
      expect(out).toContain(`[${r}] hello from rank ${r} of 4\n`);
      expect(run.stderr()).toContain(`[${r}] bye from rank ${r}\n`);
    }
    expect(pidsOf(out).size).toBe(4);
    await expectAllDead(pidsOf(out).values());
  });

  it('passes the job environment; a rank that exits 0 without joining is not missing; --no-prefix', async () => {
    const run = cli([...base, '--nproc-per-node', '2', '--join-timeout', '60', '--no-prefix', PLAIN_MJS]);
    const { code, ms } = await run.done;
    expect(code).toBe(0);
    expect(ms).toBeLessThan(30_000); // did not sit out the join timeout
    const lines = run.stdout().trimEnd().split('\n').sort();
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^pid=\d+ rank=0 world=2 local=0\/2 group=0 hosted=1$/);
    expect(lines[1]).toMatch(/^pid=\d+ rank=1 world=2 local=1\/2 group=0 hosted=1$/);
  });

  it('fails the job naming a rank that never joins within the join timeout', async () => {
    // Long enough for three ranks to start on a busy two-core machine.
    const run = cli([...base, '--nproc-per-node', '3', '--join-timeout', '6', RANK_TS, 'nojoin', '1']);
    const { code, ms } = await run.done;
    expect(code).toBe(1);
    expect(lastLine(run.stderr())).toBe('nccl-node run: rank 1 did not join within 6 s (--join-timeout); stopped ranks 0, 1, 2');
    expect(ms).toBeLessThan(20_000);
    await expectAllDead(pidsOf(run.stdout()).values());
  });

  it('exits with a failing rank\'s code, naming it, and stops the others', async () => {
    const run = cli([...base, '--nproc-per-node', '4', RANK_TS, 'exit3', '2']);
    const { code } = await run.done;
    expect(code).toBe(3);
    const pids = pidsOf(run.stdout());
    expect(pids.size).toBe(4);
    expect(lastLine(run.stderr())).toBe(`nccl-node run: rank 2 (pid ${pids.get(2)}) exited with code 3; stopped ranks 0, 1, 3`);
    await expectAllDead(pids.values());
  });

  it('reports a rank killed by a signal as 128 + its number', async () => {
    const run = cli([...base, '--nproc-per-node', '3', RANK_TS, 'sigkill', '1']);
    const { code } = await run.done;
    expect(code).toBe(137);
    const pids = pidsOf(run.stdout());
    expect(lastLine(run.stderr())).toBe(`nccl-node run: rank 1 (pid ${pids.get(1)}) was killed by signal SIGKILL; stopped ranks 0, 2`);
    await expectAllDead(pids.values());
  });

  it('SIGKILLs ranks that ignore SIGTERM once the grace period is over', async () => {
    const run = cli([...base, '--nproc-per-node', '2', '--grace-period', '0.5', RANK_TS, 'exit3', '0'], { LAUNCH_TEST_IGNORE_SIGTERM: '1' });
    const { code } = await run.done;
    expect(code).toBe(3);
    expect(lastLine(run.stderr())).toMatch(/^nccl-node run: rank 0 \(pid \d+\) exited with code 3; stopped rank 1$/);
    await expectAllDead(pidsOf(run.stdout()).values());
  });

  it('stops every rank when the launcher gets SIGTERM', async () => {
    const run = cli([...base, '--nproc-per-node', '2', RANK_TS, 'hang']);
    await waitFor(() => pidsOf(run.stdout()).size === 2, 15_000);
    run.child.kill('SIGTERM');
    const { code } = await run.done;
    expect(code).toBe(143);
    expect(lastLine(run.stderr())).toBe('nccl-node run: launcher received SIGTERM; stopped ranks 0, 1');
    await expectAllDead(pidsOf(run.stdout()).values());
  });

  it('leaves no orphans when the launcher itself is SIGKILLed', async () => {
    const run = cli([...base, '--nproc-per-node', '2', '--grace-period', '1', RANK_TS, 'hang']);
    await waitFor(() => pidsOf(run.stdout()).size === 2, 15_000);
    const pids = [...pidsOf(run.stdout()).values()];
    expect(pids.every(alive)).toBe(true);
    run.child.kill('SIGKILL');
    await run.done;
    await expectAllDead(pids, 5_000);
  });

  it('runs one job across two launchers (nodes) and fails both when a rank on node 1 fails', async () => {
    const port = String(await freePort());
    const env = { NCCL_NODE_TOKEN: 'test-token-shared-by-both-nodes' };
    const common = ['run', '--nnodes', '2', '--nproc-per-node', '2', '--master-port', port];
    const node0 = cli([...common, '--node-rank', '0', RANK_TS, 'exit3', '3'], env);
    const node1 = cli([...common, '--node-rank', '1', RANK_TS, 'exit3', '3'], env);
    const [r0, r1] = await Promise.all([node0.done, node1.done]);
    const pid3 = pidsOf(node1.stdout()).get(3);
    expect(r1.code).toBe(3);
    expect(lastLine(node1.stderr())).toBe(`nccl-node run: rank 3 (pid ${pid3}) exited with code 3; stopped rank 2`);
    expect(r0.code).toBe(3);
    expect(lastLine(node0.stderr())).toMatch(new RegExp(`^nccl-node run: rank 3 \\(pid ${pid3}\\) exited with code 3 on node 1 \\(.+\\); stopped ranks 0, 1$`));
    await expectAllDead([...pidsOf(node0.stdout()).values(), ...pidsOf(node1.stdout()).values()]);
  });

  it('succeeds across two launchers', async () => {
    const port = String(await freePort());
    const env = { NCCL_NODE_TOKEN: 'another-test-token' };
    const common = ['run', '--prefix', '--nnodes', '2', '--nproc-per-node', '1', '--master-port', port];
    const node1 = cli([...common, '--node-rank', '1', RANK_TS, 'ok'], env); // before node 0: it must wait for the store
    const node0 = cli([...common, '--node-rank', '0', RANK_TS, 'ok'], env);
    const [r0, r1] = await Promise.all([node0.done, node1.done]);
    expect([r0.code, r1.code]).toEqual([0, 0]);
    expect(node0.stdout()).toContain('[0] hello from rank 0 of 2');
    expect(node1.stdout()).toContain('[1] hello from rank 1 of 2');
  });

  it('a node whose ranks all exited 0 exits 0 when the store closes before its last write is answered', async () => {
    // Node 0 closes the store once every rank's done key is in; that close reaches node 1
    // on its waiting connection and can overtake the reply to node 1's own done write,
    // which travels on another. The proxy makes the overtaking certain: it forwards node
    // 1's done write but never its reply.
    const port = await freePort();
    const proxy = await holdingProxy(port, Buffer.from('nccl-node/done/1'));
    try {
      const env = { NCCL_NODE_TOKEN: 'a-third-test-token' };
      const common = ['run', '--prefix', '--nnodes', '2', '--nproc-per-node', '1'];
      const node0 = cli([...common, '--master-port', String(port), '--node-rank', '0', RANK_TS, 'ok'], env);
      const node1 = cli([...common, '--master-port', String(proxy.port), '--node-rank', '1', RANK_TS, 'ok'], env);
      const [r0, r1] = await Promise.all([node0.done, node1.done]);
      expect(proxy.held(), 'the proxy saw and held the done write').toBe(1);
      expect([r0.code, r1.code], node1.stderr()).toEqual([0, 0]);
      expect(node1.stderr()).not.toMatch(/error|ERR_/);
      expect(node1.stdout()).toContain('[1] hello from rank 1 of 2');
    } finally {
      proxy.close();
    }
  });

  it('rejects bad usage with exit code 2 and a clear message', async () => {
    const cases: Array<[string[], RegExp, NodeJS.ProcessEnv?]> = [
      [['run', '--nproc-per-node', '0', PLAIN_MJS], /--nproc-per-node.*'0' is invalid/],
      [['run', '--nproc-per-node', 'two', PLAIN_MJS], /--nproc-per-node.*'two' is invalid/],
      [['run', '--nproc_per_node', 'two', PLAIN_MJS], /--nproc-per-node.*'two' is invalid/],
      [['run', '--nproc-per-node', '1', '--redirects', '3', PLAIN_MJS], /--redirects and --tee need --log-dir/],
      [['run', '--nproc-per-node', '1', '--log-dir', '/tmp', '--tee', '4', PLAIN_MJS], /--tee: expected 0, 1, 2 or 3/],
      [['run', '--nproc-per-node', '1', '--local-ranks-filter', 'a', PLAIN_MJS], /--local-ranks-filter: expected local ranks/],
      [['run', '--nproc-per-node', '1', '--standalone', '--nnodes', '2', PLAIN_MJS], /--standalone runs one node/],
      [['run', PLAIN_MJS], /required option '--nproc-per-node <n>' not specified/],
      [['run', '--nproc-per-node', '1', '--bogus', PLAIN_MJS], /unknown option '--bogus'/],
      [['run', '--nproc-per-node', '1'], /missing required argument 'script'/],
      [['run', '--nproc-per-node', '1', 'test/fixtures/no-such-script.mjs'], /script not found: .*no-such-script\.mjs/],
      [['run', '--nproc-per-node', '1', 'tsconfig.json'], /script must end in \.js, \.mjs/],
      [['run', '--nproc-per-node', '1', '--join-timeout', '0', PLAIN_MJS], /--join-timeout.*'0' is invalid/],
      [['run', '--nproc-per-node', '1', '--nnodes', '2', '--node-rank', '2', PLAIN_MJS], /--node-rank 2 must be below --nnodes 2/],
      [['run', '--nproc-per-node', '1', '--nnodes', '2', '--master-port', '0', PLAIN_MJS], /masterPort 0 .* only works with a single node/],
      [['run', '--nproc-per-node', '1', '--nnodes', '2', '--node-rank', '1', PLAIN_MJS], /NCCL_NODE_TOKEN is not set/],
      [['frobnicate'], /unknown command 'frobnicate'/],
    ];
    // A few at a time: each is a node process compiling the CLI through tsx.
    for (let i = 0; i < cases.length; i += 4) {
      const batch = cases.slice(i, i + 4);
      const runs = batch.map(([args, , env]) => cli(args, env));
      for (const [j, run] of runs.entries()) {
        const { code } = await run.done;
        const [args, pattern] = batch[j] as [string[], RegExp];
        expect({ args, code }).toEqual({ args, code: 2 });
        expect(run.stderr()).toMatch(pattern);
      }
    }
  }, 90_000);
});
