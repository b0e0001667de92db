/**
 * Failure detection under `nccl-node run` (docs/launcher.md, "Failure detection"): one
 * launcher with --max-restarts runs a 3-rank Gloo gang once per trial. In each trial the
 * survivors wait in an all-reduce the last rank never joins; the test SIGKILLs or
 * SIGSTOPs that rank (or it throws), and every survivor's in-flight all-reduce must
 * reject with ERR_PEER_LOST naming the rank, its pid and the cause, within the bounds:
 * SIGKILL < 2 s at p99, SIGSTOP < heartbeat timeout + 1 s at p99, and a SIGSTOP no
 * sooner than the heartbeats allow (so it was the heartbeat path that caught it).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { resolveOptions } from '../../src/launch/options.js';
import { percentile } from '../../src/poc/stats.js';
import { standinEnv } from '../gpu/helpers.js';
import { freePort } from '../helpers/ranks.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.join(ROOT, 'bin/nccl-node.js');
const FIXTURE = 'test/launch/fixtures/heartbeat-rank.mts';
const INTERVAL_MS = 250;
const TIMEOUT_MS = 750;
/** The monitor's poll period at this interval (health-monitor.ts). */
const POLL_MS = INTERVAL_MS / 4;
const QUIET_MS = 2 * TIMEOUT_MS;

type Kind = 'kill' | 'stop' | 'throw' | 'finish';
const PLAN: Kind[] = [
  // 10 SIGKILL and 5 SIGSTOP trials, interleaved.
  ...Array.from({ length: 15 }, (_, i): Kind => (i % 3 === 1 ? 'stop' : 'kill')),
  'throw',
  'finish',
];

interface Rejection {
  attempt: number;
  rank: number;
  t: number;
  code: string;
  failedRank?: number;
  told?: number;
  message: string;
  inFlight: number;
}

interface Trial {
  kind: Kind;
  victimPid?: number;
  waiting: number;
  signalledAt?: number;
  rejections: Rejection[];
}

const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

const now = (): number => performance.timeOrigin + performance.now();

interface Gang {
  /** One launcher per node; all share the trials. */
  nodes: number;
  nproc: number;
  plan: Kind[];
  /** Extra environment of the launchers (and so the ranks). */
  env?: NodeJS.ProcessEnv;
}

interface Outcome {
  codes: Array<number | null>;
  errs: string[];
  trials: Trial[];
  finished: string[];
}

async function runTrials(g: Gang): Promise<Outcome> {
  const trials: Trial[] = g.plan.map((kind) => ({ kind, waiting: 0, rejections: [] }));
  const finished: string[] = [];
  const survivors = g.nodes * g.nproc - 1;
  const strike = (trial: Trial): void => {
    if (trial.victimPid === undefined || trial.waiting < survivors || trial.signalledAt !== undefined || trial.kind === 'throw') return;
    // Let the survivors' all-reduce reach the native thread first.
    setTimeout(() => {
      trial.signalledAt = now();
      process.kill(trial.victimPid!, trial.kind === 'kill' ? 'SIGKILL' : 'SIGSTOP');
    }, 50);
  };
  const onLine = (line: string): void => {
    const m = /^HB (ready|waiting) attempt=(\d+) rank=\d+ pid=(\d+)/.exec(line);
    if (m) {
      const trial = trials[Number(m[2])]!;
      if (m[1] === 'ready') trial.victimPid = Number(m[3]);
      else trial.waiting++;
      strike(trial);
    } else if (line.startsWith('HB rejected ')) {
      const r = JSON.parse(line.slice('HB rejected '.length)) as Rejection;
      trials[r.attempt]!.rejections.push(r);
    } else if (line.startsWith('HB finished ')) {
      finished.push(line);
    }
  };
  const several = g.nodes > 1;
  const port = several ? String(await freePort()) : undefined;
  const ends = await Promise.all([...Array(g.nodes).keys()].map((node) => {
    const flags = ['--nproc-per-node', String(g.nproc), '--max-restarts', String(g.plan.length - 1), '--grace-period', '0.5',
      '--heartbeat-interval', String(INTERVAL_MS / 1000), '--heartbeat-timeout', String(TIMEOUT_MS / 1000), '--join-timeout', '30',
      ...(several ? ['--nnodes', String(g.nodes), '--node-rank', String(node), '--master-addr', '127.0.0.1', '--master-port', port!] : [])];
    const child = spawn(process.execPath, [BIN, 'run', ...flags, FIXTURE], {
      cwd: ROOT,
      env: { ...process.env, NCCL_NODE_TOKEN: several ? 'heartbeat-test-token' : undefined, HB_PLAN: g.plan.join(','), HB_QUIET_MS: String(QUIET_MS), ...g.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(child);
    let pending = '';
    child.stdout.on('data', (d: Buffer) => {
      pending += d.toString();
      const lines = pending.split('\n');
      pending = lines.pop()!;
      lines.forEach(onLine);
    });
    let err = '';
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    return new Promise<{ code: number | null; err: string }>((resolve) => child.on('close', (code) => resolve({ code, err })));
  }));
  return { codes: ends.map((e) => e.code), errs: ends.map((e) => e.err), trials, finished };
}

/** Checks every trial's rejections; returns each signalled trial's latency to the last survivor's rejection. */
function checkTrials(o: Outcome, g: Gang): Record<'kill' | 'stop', number[]> {
  const victim = g.nodes * g.nproc - 1;
  const latencies: Record<'kill' | 'stop', number[]> = { kill: [], stop: [] };
  o.trials.forEach((trial, attempt) => {
    if (trial.kind === 'finish') return;
    const pid = trial.victimPid;
    expect(pid, `attempt ${attempt}: the victim's pid`).toBeDefined();
    const cause = {
      kill: `rank ${victim} \\(pid ${pid}\\) was killed by signal SIGKILL`,
      stop: `rank ${victim} \\(pid ${pid}\\) missed heartbeats for \\d+\\.\\d s \\(timeout 0.75 s\\): hung or stopped`,
      throw: `rank ${victim} \\(pid ${pid}\\) exited with code 1: Error: deliberate failure on rank ${victim}`,
    }[trial.kind];
    const seen = trial.rejections.map((r) => ({ ...r, t: 0 })).sort((a, b) => a.rank - b.rank);
    expect(seen, `attempt ${attempt} (${trial.kind})`).toEqual([...Array(victim).keys()].map((rank) => ({
      attempt, rank, t: 0, code: 'ERR_PEER_LOST', failedRank: victim, told: victim, inFlight: 0,
      message: expect.stringMatching(new RegExp(`^rank ${rank}: the job failed: ${cause} \\(node ${g.nodes - 1}, [^)]+\\)$`)) as unknown as string,
    })));
    // The victim's launcher names the same cause.
    expect(o.errs[g.nodes - 1]).toMatch(new RegExp(`attempt ${attempt} failed: ${cause}`));
    if (trial.kind === 'throw') return;
    expect(trial.signalledAt).toBeDefined();
    latencies[trial.kind].push(Math.max(...trial.rejections.map((r) => r.t)) - trial.signalledAt!);
  });
  // The last attempt: quiet spells longer than the timeout (in a collective, after destroy()) are no hang.
  const sum = String(((victim + 1) * (victim + 2)) / 2);
  expect(o.finished.map((l) => / rank=(\d) sum=(\d+)/.exec(l)!.slice(1).join(':')).sort())
    .toEqual([...Array(victim + 1).keys()].map((r) => `${r}:${sum}`));
  return latencies;
}

describe('failure detection: heartbeats, the health monitor and aborts', { timeout: 120_000 }, () => {
  it('aborts every survivor\'s in-flight all-reduce naming the killed, stopped or failed rank, within the bounds', async () => {
    const t0 = Date.now();
    const gang: Gang = { nodes: 1, nproc: 3, plan: PLAN };
    const outcome = await runTrials(gang);
    expect({ code: outcome.codes[0], tail: outcome.codes[0] === 0 ? '' : outcome.errs[0]!.slice(-3000) }).toEqual({ code: 0, tail: '' });
    const latencies = checkTrials(outcome, gang);

    const kill99 = percentile(latencies.kill, 99);
    const stop99 = percentile(latencies.stop, 99);
    console.log(`failure detection over ${latencies.kill.length} SIGKILL and ${latencies.stop.length} SIGSTOP trials `
      + `(3 ranks, heartbeat ${INTERVAL_MS} ms, timeout ${TIMEOUT_MS} ms; ${((Date.now() - t0) / 1000).toFixed(1)} s in all):\n`
      + `  SIGKILL -> every survivor's all-reduce rejected: p50 ${percentile(latencies.kill, 50).toFixed(1)} ms, p99 ${kill99.toFixed(1)} ms, max ${Math.max(...latencies.kill).toFixed(1)} ms\n`
      + `  SIGSTOP -> every survivor's all-reduce rejected: p50 ${percentile(latencies.stop, 50).toFixed(1)} ms, p99 ${stop99.toFixed(1)} ms, min ${Math.min(...latencies.stop).toFixed(1)} ms`);
    expect(latencies.kill).toHaveLength(PLAN.filter((k) => k === 'kill').length);
    expect(latencies.stop).toHaveLength(PLAN.filter((k) => k === 'stop').length);
    expect(kill99).toBeLessThan(2_000);
    expect(stop99).toBeLessThan(TIMEOUT_MS + 1_000);
    // A stopped rank's last heartbeat was at most one interval (and one poll) before the stop.
    expect(Math.min(...latencies.stop)).toBeGreaterThan(TIMEOUT_MS - INTERVAL_MS - POLL_MS);
  });

  it('aborts the survivors on another node too, for a SIGKILLed and a SIGSTOPped rank (2 nodes x 2 ranks)', async () => {
    const gang: Gang = { nodes: 2, nproc: 2, plan: ['kill', 'stop', 'finish'] };
    const outcome = await runTrials(gang);
    expect({ codes: outcome.codes, tail: outcome.codes.every((c) => c === 0) ? '' : outcome.errs.join('\n---\n').slice(-3000) })
      .toEqual({ codes: [0, 0], tail: '' });
    const latencies = checkTrials(outcome, gang);
    console.log(`2 nodes x 2 ranks: SIGKILL -> all 3 survivors rejected in ${latencies.kill[0]!.toFixed(1)} ms, SIGSTOP in ${latencies.stop[0]!.toFixed(1)} ms`);
    expect(latencies.kill[0]).toBeLessThan(2_000);
    expect(latencies.stop[0]).toBeLessThan(TIMEOUT_MS + 1_000);
  });

  it('does the same on NCCL (the stand-ins): a SIGKILLed and a SIGSTOPped rank are named', async () => {
    const gang: Gang = { nodes: 1, nproc: 3, plan: ['kill', 'stop', 'finish'], env: { ...standinEnv(), HB_BACKEND: 'nccl' } };
    const outcome = await runTrials(gang);
    expect({ code: outcome.codes[0], tail: outcome.codes[0] === 0 ? '' : outcome.errs[0]!.slice(-3000) }).toEqual({ code: 0, tail: '' });
    const latencies = checkTrials(outcome, gang);
    console.log(`NCCL stand-ins, 3 ranks: SIGKILL -> survivors rejected in ${latencies.kill[0]!.toFixed(1)} ms, SIGSTOP in ${latencies.stop[0]!.toFixed(1)} ms`);
    expect(latencies.kill[0]).toBeLessThan(2_000);
    expect(latencies.stop[0]).toBeLessThan(TIMEOUT_MS + 1_000);
  });

  it('refuses a heartbeat timeout that is not longer than the interval', () => {
    const base = { script: FIXTURE, cwd: ROOT, nprocPerNode: 1 };
    expect(() => resolveOptions({ ...base, heartbeatIntervalMs: 1_000, heartbeatTimeoutMs: 1_000 }))
      .toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARGUMENT', message: expect.stringMatching(/heartbeatTimeoutMs \(1000\) must be longer than heartbeatIntervalMs \(1000\)/) }));
    expect(resolveOptions({ ...base, heartbeatIntervalMs: 2_000 })).toMatchObject({ heartbeatIntervalMs: 2_000, heartbeatTimeoutMs: 6_000 });
    expect(resolveOptions(base)).toMatchObject({ heartbeatIntervalMs: 5_000, heartbeatTimeoutMs: 15_000 });
  });
});
