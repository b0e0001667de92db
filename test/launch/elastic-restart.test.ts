/**
 * --max-restarts: a failed gang is re-run as a whole, TORCHELASTIC_RESTART_COUNT counts
 * the attempts, and each attempt's output goes to its own attempt_<k>/ directory. The
 * reference is the real torchrun (torch's CPU wheel) running the same fixture with the
 * same flags: every rank must see the same sequence of attempts and variables, the job
 * must end the same way, and --log-dir must hold the same files with the same text.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';

import { torchVenv, type TorchVenv } from './torch-venv.js';
import { freePort } from '../helpers/ranks.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.join(ROOT, 'bin/nccl-node.js');
const FIXTURE = 'test/launch/fixtures/elastic-rank.mjs';

let venv: TorchVenv;
const children: ChildProcess[] = [];
const dirs: string[] = [];

interface Report {
  t: number;
  pid: number;
  RANK: string;
  WORLD_SIZE: string;
  TORCHELASTIC_RESTART_COUNT: string;
  TORCHELASTIC_MAX_RESTARTS: string;
}

interface Done {
  code: number | null;
  err: string;
  reports: Report[];
  /** Relative path (below <log-dir>/<run>_<random>/) -> content. */
  logs: Record<string, string>;
}

function tmp(prefix: string): string {
  const d = mkdtempSync(path.join(os.tmpdir(), prefix));
  dirs.push(d);
  return d;
}

function files(dir: string, base = dir): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(path.join(dir, e.name), base) : [path.relative(base, path.join(dir, e.name))]);
}

/** Runs a launcher command; the fixture's reports come back through files, one per rank process. */
function exec(file: string, args: string[], env: NodeJS.ProcessEnv): Promise<Done> {
  const reports = tmp('nccl-node-elastic-reports-');
  const logDir = tmp('nccl-node-elastic-logs-');
  return new Promise((resolve) => {
    const child = spawn(file, [...args.slice(0, -2), '--log-dir', logDir, '--tee', '1', ...args.slice(-2)], {
      cwd: ROOT,
      env: { ...process.env, NCCL_NODE_TOKEN: undefined, ELASTIC_REPORTS: reports, ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    children.push(child);
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), 50_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      const lines = readdirSync(reports).flatMap((f) => readFileSync(path.join(reports, f), 'utf8').split('\n').filter(Boolean));
      const runs = readdirSync(logDir);
      const logs: Record<string, string> = {};
      if (runs.length === 1) {
        const run = path.join(logDir, runs[0]!);
        for (const f of files(run)) if (f.endsWith('stdout.log')) logs[f] = readFileSync(path.join(run, f), 'utf8');
      }
      resolve({ code, err, reports: lines.map((l) => JSON.parse(l) as Report), logs });
    });
  });
}

/** Per rank, in the order the attempts ran: what the rank saw. */
function sequences(run: Done): Record<string, Array<Record<string, unknown>>> {
  const byRank: Record<string, Report[]> = {};
  for (const r of run.reports) (byRank[r.RANK] ??= []).push(r);
  return Object.fromEntries(Object.entries(byRank).map(([rank, list]) => [rank, list.sort((a, b) => a.t - b.t).map((r, attempt) => ({
    attempt,
    RANK: r.RANK,
    WORLD_SIZE: r.WORLD_SIZE,
    TORCHELASTIC_RESTART_COUNT: r.TORCHELASTIC_RESTART_COUNT,
    TORCHELASTIC_MAX_RESTARTS: r.TORCHELASTIC_MAX_RESTARTS,
  }))]));
}

/** The same job under nccl-node run and under torchrun (its workers run `node FIXTURE`). */
function both(maxRestarts: number, env: NodeJS.ProcessEnv): Promise<[Done, Done]> {
  const flags = ['--nproc-per-node', '2', '--max-restarts', String(maxRestarts)];
  return Promise.all([
    exec(process.execPath, [BIN, 'run', ...flags, '--grace-period', '2', FIXTURE, '-'], env),
    exec(venv.torchrun, ['--no-python', '--standalone', ...flags, 'node', FIXTURE], env),
  ]).then(([ours, theirs]) => [ours, theirs]);
}

beforeAll(async () => {
  venv = await torchVenv();
}, 20 * 60_000);

afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  for (const d of dirs.splice(0)) {
    // Ranks of a launcher killed above (torchrun's have no orphan guard).
    for (const f of readdirSync(d).filter((n) => n.endsWith('.jsonl'))) {
      try {
        process.kill(Number(f.slice(0, -'.jsonl'.length)), 'SIGKILL');
      } catch {
        // Already gone.
      }
    }
    rmSync(d, { recursive: true, force: true });
  }
});

describe('--max-restarts, against torchrun', { timeout: 60_000 }, () => {
  // Rank 0 exits 3 on attempt 0; rank 1 would hold 10 s there, so it is stopped, not finished.
  const FAIL_FIRST = { ELASTIC_FAIL: '0:0:3', ELASTIC_HOLD_MS: '0:10000' };

  it('re-runs the gang after a failure: restart counts 0 then 1, success, attempt_0/ and attempt_1/ logs', async () => {
    const [ours, theirs] = await both(1, FAIL_FIRST);
    expect({ code: theirs.code, err: theirs.code === 0 ? '' : theirs.err }).toEqual({ code: 0, err: '' });
    expect({ code: ours.code, err: ours.code === 0 ? '' : ours.err }).toEqual({ code: 0, err: '' });
    const expected = sequences(theirs);
    expect(expected['0']!.map((r) => r.TORCHELASTIC_RESTART_COUNT)).toEqual(['0', '1']);
    expect(sequences(ours)).toEqual(expected);
    expect(Object.keys(theirs.logs).sort()).toEqual(['attempt_0/0/stdout.log', 'attempt_0/1/stdout.log', 'attempt_1/0/stdout.log', 'attempt_1/1/stdout.log']);
    expect(ours.logs).toEqual(theirs.logs);
    expect(ours.err).toContain('attempt 0 failed: rank 0');
  });

  it('with --max-restarts 0 the first failure ends the job, with the failing rank\'s code', async () => {
    const [ours, theirs] = await both(0, FAIL_FIRST);
    expect(theirs.code).not.toBe(0);
    expect(ours.code).toBe(3);
    expect(sequences(ours)).toEqual(sequences(theirs));
    expect(Object.keys(ours.logs).sort()).toEqual(['attempt_0/0/stdout.log', 'attempt_0/1/stdout.log']);
    expect(ours.err.trimEnd().split('\n').at(-1)).toMatch(/^nccl-node run: rank 0 \(pid \d+\) exited with code 3/);
  });

  it('two static nodes (--nnodes 2 --node-rank K) re-form after a rank on node 1 fails', async () => {
    const reports = tmp('nccl-node-elastic-reports-');
    const port = String(await freePort());
    const run = (nodeRank: number): Promise<{ code: number | null; err: string }> => new Promise((resolve) => {
      const child = spawn(process.execPath, [BIN, 'run', '--nnodes', '2', '--node-rank', String(nodeRank), '--nproc-per-node', '2', '--master-addr', '127.0.0.1',
        '--master-port', port, '--max-restarts', '1', '--grace-period', '1', '--join-timeout', '20', FIXTURE], {
        cwd: ROOT,
        env: { ...process.env, NCCL_NODE_TOKEN: 'static-restart-token', ELASTIC_REPORTS: reports, ELASTIC_FAIL: '0:2:7', ELASTIC_HOLD_MS: '0:20000' },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      children.push(child);
      let err = '';
      child.stderr.on('data', (d: Buffer) => (err += d.toString()));
      child.on('close', (code) => resolve({ code, err }));
    });
    const ends = await Promise.all([run(0), run(1)]);
    expect(ends.map((e) => e.code), ends.map((e) => e.err).join('\n')).toEqual([0, 0]);
    const lines = readdirSync(reports).flatMap((f) => readFileSync(path.join(reports, f), 'utf8').split('\n').filter(Boolean)).map((l) => JSON.parse(l) as Report);
    const done: Done = { code: 0, err: '', reports: lines, logs: {} };
    const seq = (rank: string): Array<Record<string, unknown>> => [0, 1].map((attempt) => ({
      attempt, RANK: rank, WORLD_SIZE: '4', TORCHELASTIC_RESTART_COUNT: String(attempt), TORCHELASTIC_MAX_RESTARTS: '1',
    }));
    expect(sequences(done)).toEqual({ 0: seq('0'), 1: seq('1'), 2: seq('2'), 3: seq('3') });
    expect(ends[0]!.err).toMatch(/attempt 0 failed: rank 2 \(pid \d+\) exited with code 7 on node 1/);
  });

  it('a restarted Gloo job joins and all-reduces again in a fresh store scope', async () => {
    // Attempt 0: rank 1 SIGKILLs itself mid-job; attempt 1 must init() and all-reduce cleanly.
    const reports = tmp('nccl-node-elastic-reports-');
    const end = await new Promise<{ code: number | null; err: string }>((resolve) => {
      const child = spawn(process.execPath, [BIN, 'run', '--nproc-per-node', '3', '--max-restarts', '1', '--grace-period', '1', 'test/launch/fixtures/elastic-gloo.mts'], {
        cwd: ROOT,
        env: { ...process.env, NCCL_NODE_TOKEN: undefined, ELASTIC_REPORTS: reports },
        stdio: ['ignore', 'ignore', 'pipe'],
      });
      children.push(child);
      let err = '';
      child.stderr.on('data', (d: Buffer) => (err += d.toString()));
      child.on('close', (code) => resolve({ code, err }));
    });
    expect({ code: end.code, err: end.code === 0 ? '' : end.err }).toEqual({ code: 0, err: '' });
    const got = readdirSync(reports).flatMap((f) => readFileSync(path.join(reports, f), 'utf8').split('\n').filter(Boolean))
      .map((l) => JSON.parse(l) as { attempt: number; rank: number; sum: number })
      .sort((a, b) => a.attempt - b.attempt || a.rank - b.rank);
    // 1 + 2 + 3 on every rank. In attempt 0 a rank that had not finished its all-reduce
    // when rank 1 died may have no report; attempt 1 must have all three.
    expect(got.filter((r) => r.attempt === 0 && r.sum !== 6)).toEqual([]);
    expect(got.some((r) => r.attempt === 0 && r.rank === 1)).toBe(true);
    expect(got.filter((r) => r.attempt === 1)).toEqual([0, 1, 2].map((rank) => ({ attempt: 1, rank, sum: 6 })));
    expect(end.err).toMatch(/attempt 0 failed: rank 1 \(pid \d+\) was killed by signal SIGKILL/);
  });

  it('after the last restart fails too, exits with that attempt\'s first failure', async () => {
    // Rank 1 fails on attempt 0 (code 4), rank 0 on attempt 1 (code 5): the job ends with 5.
    const [ours, theirs] = await both(1, { ELASTIC_FAIL: '0:1:4,1:0:5', ELASTIC_HOLD_MS: '0:10000,1:10000' });
    expect(theirs.code).not.toBe(0);
    expect(ours.code).toBe(5);
    expect(sequences(ours)).toEqual(sequences(theirs));
    expect(ours.err.trimEnd().split('\n').at(-1)).toMatch(/^nccl-node run: rank 0 \(pid \d+\) exited with code 5/);
  });
});
