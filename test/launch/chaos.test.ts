/**
 * Fault tolerance's acceptance test: a 2-node x 2-rank Gloo training run of TinyLM
 * (train() through test/launch/fixtures/chaos-train.mts: checkpoints every few steps,
 * resume on every start) under `nccl-node run --nnodes 2 --max-restarts K
 * --heartbeat-interval 0.25`, one launcher per network namespace, while a seeded
 * schedule injects faults of every kind: a rank SIGKILLed, a rank SIGSTOPped (only the
 * heartbeats can tell), the whole second node SIGKILLed (its launcher is then started
 * again, as a scheduler would), the second node's link cut for a few seconds and healed,
 * the second node's link slowed (tc tbf) for a few seconds and restored, and the
 * launcher that hosts the rendezvous store SIGKILLed (the other launcher then ends with
 * ERR_STORE, and the job is started again on both nodes, as a scheduler would).
 * Asserted: the run completes; its final parameters are bit-identical to an
 * uninterrupted run of the same config (same world size and seed, one node, computed
 * here); every committed checkpoint verifies; every restart resumes from the newest
 * checkpoint committed before its fault (none lost); a slowed link either keeps training
 * (no restart, steps done while slowed) or, if a timeout fires, recovers like a fault.
 * Printed per fault: detection time, recovery time, steps recomputed (for a slowed link
 * also the step time before and while slowed); and the effective training time.
 * CHAOS_SEED replays a schedule; CHAOS_ROUNDS faults of each kind (default 2).
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { listCheckpoints, verify } from '../../src/checkpoint/index.js';
import { createCluster, netnsAvailable, type Cluster, type NetNode, type Spawned } from '../helpers/netns.js';
import { mulberry32 } from '../../src/util/prng.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.join(ROOT, 'bin/nccl-node.js');
const FIXTURE = 'test/launch/fixtures/chaos-train.mts';
const PORT = 29500;
const SEED = Number(process.env.CHAOS_SEED ?? Math.floor(Math.random() * 2 ** 31));
const ROUNDS = Number(process.env.CHAOS_ROUNDS ?? '2');
const KINDS = ['kill-rank', 'stop-rank', 'kill-node', 'partition', 'slow-link', 'kill-store'] as const;
type Kind = (typeof KINDS)[number];
const STEP_MS = 40;
const CKPT_EVERY = 4;
// A fault moves the furthest step on by at most ~8 (its gap of 3-7 and one in flight): 10 each leaves room.
const STEPS = 30 + ROUNDS * KINDS.length * 10;
/** The slowed link's rate: an all-reduce step's bytes take several times the 40 ms step over it. */
const SLOW_RATE = '2mbit';
/** How long the launchers of the faulted run may take in all. */
const RUN_MS = 160_000;

/** A seeded generator, so a schedule replays from its seed. */
const rng = mulberry32;

interface Line { t: number; node: number; text: string }
interface Proc { pid: number; rank: number; host: string; attempt: number }

let cluster: Cluster;
let work: string;
const lines: Line[] = [];

function tap(s: Spawned, node: number): Spawned {
  for (const stream of [s.child.stdout!, s.child.stderr!]) {
    let rest = '';
    stream.on('data', (d: Buffer) => {
      const parts = (rest + d.toString()).split('\n');
      rest = parts.pop()!;
      const t = Date.now();
      for (const text of parts) lines.push({ t, node, text });
    });
  }
  return s;
}

function launch(node: NetNode, flags: string[], env: Record<string, string>, timeoutMs: number): Spawned {
  return tap(cluster.spawnOn(node, process.execPath, [BIN, 'run', '--prefix', ...flags, FIXTURE], {
    cwd: ROOT, env: { ...process.env, NCCL_NODE_TOKEN: 'chaos-test-token', ...env }, timeoutMs,
  }), node.index);
}

async function waitFor<T>(what: string, get: () => T | undefined, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = get();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}\n${lines.slice(-40).map((l) => `${l.node}: ${l.text}`).join('\n')}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const stepOf = (l: Line): number | undefined => { const m = /^\[0\] step (\d+) loss/.exec(l.text); return m ? Number(m[1]) : undefined; };
const stepsAfter = (t: number): Array<{ t: number; step: number }> => lines.filter((l) => l.t >= t).flatMap((l) => { const s = stepOf(l); return s === undefined ? [] : [{ t: l.t, step: s }]; });
/** Rank 0's steps in lines[from, to): exact about a fault's moment, where a timestamp may tie. */
const stepsIn = (from: number, to = lines.length): number[] => lines.slice(from, to).flatMap((l) => { const s = stepOf(l); return s === undefined ? [] : [s]; });
const hashIn = (from: number): string | undefined => lines.slice(from).map((l) => /final params sha256 ([0-9a-f]{64})/.exec(l.text)?.[1]).find(Boolean);

function procs(reports: string): Proc[] {
  return readdirSync(reports).map((f) => JSON.parse(readFileSync(path.join(reports, f), 'utf8')) as Proc);
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** `p`, or an error naming `what` after `ms`. */
async function within<T>(what: string, p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms)));
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}

const median = (xs: number[]): number | null => (xs.length ? [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]! : null);
/** The median time between consecutive step lines of `steps` (ms), null with fewer than two. */
const stepTime = (steps: Array<{ t: number }>): number | null => median(steps.slice(1).map((s, i) => s.t - steps[i]!.t));

async function committedSteps(dir: string): Promise<number[]> {
  return (await listCheckpoints(dir)).filter((e) => e.committed).map((e) => e.step);
}

describe.skipIf(!netnsAvailable())('chaos: training under injected faults', () => {
  beforeAll(() => {
    cluster = createCluster(2, 'x');
    work = mkdtempSync(path.join(os.tmpdir(), 'nccl-node-chaos-'));
  });
  afterAll(() => {
    cluster?.destroy();
    rmSync(work, { recursive: true, force: true });
  });

  it(`completes bit-identically to an uninterrupted run with every checkpoint intact (seed ${SEED})`, async () => {
    console.log(`chaos seed ${SEED} (replay: CHAOS_SEED=${SEED}), ${ROUNDS} fault(s) of each kind, ${STEPS} steps`);
    const [a, b] = cluster.nodes as [NetNode, NetNode];
    const reports = path.join(work, 'reports');
    const ckpt = path.join(work, 'ckpt');
    const base = { CHAOS_STEPS: String(STEPS), CHAOS_STEP_MS: String(STEP_MS), CHAOS_REPORTS: reports, CHAOS_TIMEOUT_MS: '20000' };
    mkdirSync(reports, { recursive: true });

    // The reference: the same world size, seed and steps, uninterrupted, on one node.
    const refFrom = lines.length;
    const ref = launch(a, ['--nproc-per-node', '4', '--master-addr', a.addr, '--master-port', String(PORT)], base, 60_000);
    const refEnd = await ref.done;
    expect(refEnd.code, ref.stderr()).toBe(0);
    const refHash = hashIn(refFrom)!;
    const refSteps = stepsAfter(ref.t0);
    expect(refSteps.length).toBe(STEPS);
    const refWall = refSteps.at(-1)!.t - refSteps[0]!.t;

    const r = rng(SEED);
    const schedule: Kind[] = KINDS.flatMap((k) => Array.from({ length: ROUNDS }, () => k));
    for (let i = schedule.length - 1; i > 0; i--) {
      const j = Math.floor(r() * (i + 1));
      [schedule[i], schedule[j]] = [schedule[j]!, schedule[i]!];
    }
    const flags = ['--nnodes', '2', '--nproc-per-node', '2', '--rdzv-backend', 'c10d', '--rdzv-endpoint', `${a.addr}:${PORT}`, '--max-restarts', String(schedule.length * 2 + 2),
      '--heartbeat-interval', '0.25', '--heartbeat-timeout', '1', '--grace-period', '1', '--join-timeout', '30', '--rdzv-last-call', '0.5'];
    const env = { ...base, CHAOS_CKPT_DIR: ckpt, CHAOS_CKPT_EVERY: String(CKPT_EVERY) };
    const from = lines.length;
    const t0 = Date.now();
    const left = (): number => Math.max(10_000, RUN_MS - (Date.now() - t0));
    let la = launch(a, flags, env, RUN_MS);
    let lb = launch(b, flags, env, RUN_MS);

    interface Fault {
      kind: Kind; victim: string; pid: number | null; tf: number; healed: number; mark: number; committed: number[];
      /** The furthest step rank 0 had logged when the fault was injected (the lines before mark). */
      atFault: number;
      /** slow-link: rank 0's step time (median ms) in the steps before the fault and while slowed; the qdiscs while slowed and after. */
      slowed?: { beforeMs: number | null; slowedMs: number | null; stepsSlowed: number; qdiscs: string[]; after: string[] };
      /** kill-store: how the killed host's launcher and the other one ended. */
      ends?: { host: string; other: number | null };
    }
    const faults: Fault[] = [];
    const notice = (l: Line): boolean => /attempt \d+ failed|ERR_PEER_LOST|missed heartbeats|is gone|lost the job's store/.test(l.text);
    let since = t0;
    for (const kind of schedule) {
      // Faults land mid-run, a few new steps past the furthest step so far, so the run moves on.
      await waitFor('training steps', () => stepsAfter(since)[0], 60_000);
      const gap = 3 + Math.floor(r() * 5);
      const high = Math.max(-1, ...stepsAfter(t0).filter((s) => s.t < since).map((s) => s.step));
      await waitFor(`step ${high + gap}`, () => stepsAfter(since).find((s) => s.step >= high + gap), 30_000);
      const before = stepsAfter(since);
      const beforeMark = lines.length;
      const lastBefore = Math.max(...before.map((s) => s.step));
      const committed = await committedSteps(ckpt);
      const live = procs(reports).filter((p) => alive(p.pid));
      const newest = Math.max(...live.map((p) => p.attempt));
      const gang = live.filter((p) => p.attempt === newest).sort((x, y) => x.rank - y.rank);
      const mark = lines.length;
      // A step may have landed since `before` was taken (the checkpoint listing awaits).
      const atFault = Math.max(lastBefore, ...stepsIn(beforeMark, mark));
      const tf = Date.now();
      let victim = '';
      let pid: number | null = null;
      const extra: Pick<Fault, 'slowed' | 'ends'> = {};
      if (kind === 'kill-rank' || kind === 'stop-rank') {
        const p = gang[Math.floor(r() * gang.length)]!;
        victim = `rank ${p.rank} pid ${p.pid} on ${p.host}`;
        pid = p.pid;
        process.kill(p.pid, kind === 'kill-rank' ? 'SIGKILL' : 'SIGSTOP');
      } else if (kind === 'kill-node') {
        victim = b.hostname;
        cluster.killNode(b);
      } else if (kind === 'partition') {
        victim = b.hostname;
        cluster.partition(b);
        await sleep(2000 + Math.floor(r() * 2000));
        cluster.heal(b);
      } else if (kind === 'slow-link') {
        victim = `${b.hostname} at ${SLOW_RATE}`;
        cluster.slow(b, SLOW_RATE);
        let qdiscs: string[] = [];
        try {
          qdiscs = cluster.rootQdiscs(b);
          await sleep(1500 + Math.floor(r() * 1500));
        } finally {
          cluster.unslow(b);
        }
        const slowedSteps = lines.slice(mark).flatMap((l) => { const s = stepOf(l); return s === undefined ? [] : [{ t: l.t, step: s }]; });
        extra.slowed = { beforeMs: stepTime(before), slowedMs: stepTime(slowedSteps), stepsSlowed: slowedSteps.length, qdiscs, after: cluster.rootQdiscs(b) };
      } else {
        // The store lives in the launcher that bound the rendezvous port (src/launch/host.ts): node a's.
        const host = cluster.listenerPid(a, PORT);
        expect(host, 'the store host is the launcher started on node a').toBe(la.child.pid);
        victim = `store host pid ${host} on ${a.hostname}`;
        pid = host!;
        process.kill(host!, 'SIGKILL');
      }
      const healed = Date.now();
      if (kind === 'kill-node') {
        // The operator notices the node's launcher died and starts it again.
        await waitFor('the failure noticed on node a', () => lines.slice(mark).find(notice), 20_000);
        lb = launch(b, flags, env, left());
      }
      if (kind === 'kill-store') {
        // The other launcher cannot go on without the store: it stops its ranks and ends
        // with ERR_STORE; the host's ranks end with their launcher (the orphan guard). A
        // scheduler then starts the job again on both nodes; it resumes from the checkpoint.
        const [endHost, endOther] = await within('both launchers to end after the store host was killed', Promise.all([la.done, lb.done]), 20_000);
        extra.ends = { host: endHost.signal ?? String(endHost.code), other: endOther.code };
        await waitFor('the store host\'s ranks to end', () => gang.every((p) => !alive(p.pid)), 20_000);
        la = launch(a, flags, env, left());
        // Node b once the store listens again: its launcher would otherwise back off between connection attempts.
        await waitFor('the new store host', () => cluster.listenerPid(a, PORT), 20_000);
        lb = launch(b, flags, env, left());
      }
      const next = await waitFor('a step after the fault', () => stepsAfter(healed)[0], 60_000);
      if (kind === 'stop-rank') {
        for (const p of gang) if (alive(p.pid)) try { process.kill(p.pid, 'SIGCONT'); } catch { /* gone */ }
      }
      faults.push({ kind, victim, pid, tf, healed, mark, atFault, committed, ...extra });
      since = next.t;
    }

    const endA = await la.done;
    const endB = await lb.done;
    const wall = Date.now() - t0;
    // Per fault, from the lines up to the next fault: the first launcher or rank notice, and
    // after it (a restart) the first step of the new gang, else the first step after the heal.
    const results = faults.map((f, i) => {
      const window = lines.slice(f.mark, faults[i + 1]?.mark ?? lines.length);
      const detected = window.find(notice);
      const first = window.find((l) => stepOf(l) !== undefined && l.t > (detected ? detected.t : f.healed));
      const resumeLine = window.map((l) => /resumed from .* at step (\d+)/.exec(l.text)).find(Boolean);
      const resumedAt = detected ? (resumeLine ? Number(resumeLine[1]) : 0) : null;
      // A gang restart names its cause; a lost store ends the other launcher with ERR_STORE instead.
      const blamed = window.find((l) => (f.kind === 'kill-store' ? /error \[ERR_STORE\]/ : /attempt \d+ failed/).test(l.text))?.text ?? null;
      return {
        kind: f.kind, victim: f.victim, atStep: f.atFault,
        detectMs: detected ? detected.t - f.tf : null,
        recoverMs: first ? first.t - f.tf : null,
        restart: detected !== undefined, resumedAt,
        recomputed: resumedAt === null ? 0 : f.atFault + 1 - resumedAt,
        committedBefore: f.committed.at(-1) ?? null,
        blamed,
        ...(f.slowed ? { stepMs: { before: f.slowed.beforeMs, slowed: f.slowed.slowedMs }, stepsSlowed: f.slowed.stepsSlowed } : {}),
        ...(f.ends ? { ends: f.ends } : {}),
      };
    });
    for (const x of results) console.log(`chaos fault ${JSON.stringify(x)}`);
    const steps = stepsAfter(t0);
    // Productive time (the uninterrupted run's first-to-last step) over the faulted run's first-to-last step.
    const effective = refWall / (steps.at(-1)!.t - steps[0]!.t);
    console.log(`chaos summary ${JSON.stringify({ seed: SEED, steps: STEPS, stepLines: steps.length, recomputed: steps.length - STEPS, wallMs: wall, uninterruptedMs: refWall, effective: Number(effective.toFixed(3)) })}`);
    expect({ a: endA.code, b: endB.code }, lines.slice(-60).map((l) => `${l.node}: ${l.text}`).join('\n')).toEqual({ a: 0, b: 0 });
    expect(results).toHaveLength(schedule.length);
    for (const [i, x] of results.entries()) {
      const f = faults[i]!;
      if (f.slowed) {
        // tbf on both ends while slowed, gone after.
        expect({ slowed: f.slowed.qdiscs, after: f.slowed.after }).toEqual({ slowed: ['tbf', 'tbf'], after: [expect.not.stringMatching(/^tbf$/), expect.not.stringMatching(/^tbf$/)] });
      }
      if (x.kind === 'partition' || x.kind === 'slow-link') {
        // A short cut may heal before anything notices (TCP retransmits), and a slow link is
        // no failure: training went on through it (steps done while slowed, none done again).
        // Where a timeout fired all the same, it is a restart like any other: nothing lost.
        if (x.restart) expect(x.resumedAt).toBeGreaterThanOrEqual(x.committedBefore ?? 0);
        else if (x.kind === 'slow-link') {
          expect(f.slowed!.stepsSlowed).toBeGreaterThan(0);
          const window = stepsIn(f.mark, faults[i + 1]?.mark);
          expect(window).toEqual(window.map((_, k) => f.atFault + 1 + k));
        }
        continue;
      }
      // Every process, node or store fault restarts the gang (a lost store: the whole job),
      // blaming the right process or node, and resumes from the newest checkpoint committed
      // before the fault, or a later one: none lost.
      expect(x.restart).toBe(true);
      expect(x.resumedAt).toBeGreaterThanOrEqual(x.committedBefore ?? 0);
      if (x.kind === 'kill-store') {
        expect(f.ends).toEqual({ host: 'SIGKILL', other: 1 });
        expect(x.blamed).toContain(`lost the job's store at ${a.addr}:${PORT}`);
      } else expect(x.blamed).toContain(f.pid !== null ? `(pid ${f.pid})` : `(${f.victim})`);
    }
    expect(hashIn(from)).toBe(refHash);
    expect(steps.at(-1)!.step).toBe(STEPS - 1);

    // Every committed checkpoint verifies; the final one is there.
    const all = await listCheckpoints(ckpt);
    const committed = all.filter((e) => e.committed);
    expect(committed.map((e) => e.step)).toContain(STEPS);
    for (const e of committed) {
      const v = await verify(e.dir);
      expect({ dir: e.dir, problems: v.problems }).toEqual({ dir: e.dir, problems: [] });
    }
  }, 240_000);
});
