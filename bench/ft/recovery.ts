/**
 * Recovery time of a training gang, broken down by phase, per fault and restore path:
 *
 *   node --import tsx bench/ft/recovery.ts [--ranks 2,4] [--faults kill-rank,hang,kill-node,partition]
 *     [--restore disk,memory,full,in-process] [--trials 3] [--step-ms 40] [--timeout-ms 20000]
 *     [--json out.json [--merge]]
 *
 * Needs root (two nodes as network namespaces, test/helpers/netns.ts). Each trial trains
 * TinyLM (test/launch/fixtures/chaos-train.mts) on 2 nodes x ranks/2 under
 * `nccl-node run --nnodes 2 --max-restarts ... --heartbeat-interval 0.25 --heartbeat-timeout 1`,
 * waits a few steps past a checkpoint, injects the fault and times, from the lines each
 * launcher and rank 0 print:
 *   detect      fault -> the first launcher notice ("...; stopping ranks", "missed heartbeats", "is gone")
 *   abort       -> "attempt N failed ...; restarting the gang" (the old ranks stopped)
 *   rendezvous  -> "rendezvous: attempt N+1 formed" (or the abort line where none is printed)
 *   restore     -> rank 0's "resumed from" / "restored step" (process start, init, load)
 *   first step  -> rank 0's first step line after it
 * Restore paths: 'disk' (the launcher restarts the gang, ranks resume from the newest
 * durable checkpoint), 'memory' (the same plus in-memory snapshots every step, restored
 * from when a copy survives), 'full' (torchrun-style: on the fault every launcher is
 * stopped and all are started again from scratch with --resume; detect is the same,
 * abort is the teardown of the launchers), 'in-process' (`--restart-scope rank` on an
 * elastic fixture, test/launch/fixtures/chaos-elastic.mts: only the lost rank is
 * restarted; the survivors re-form and keep training, the restarted rank rejoins with
 * live state transfer). Its phases: detect as above; abort -> rank 0's first step in
 * the shrunk generation ("formed generation"); rendezvous -> rank 0's first step with
 * the group grown back (the new process started, joined, and received the state);
 * restore: none; first step -> rank 0's first step line after it. A killed node still
 * takes the gang path there; a partition is declared by the survivors themselves (their
 * timeout, then a smaller generation; abort 0 where that line is the first notice), and
 * the cut node's ranks rejoin after the heal.
 *
 * A partition cuts node b's link (its switch port down: packets vanish, no resets) and
 * keeps it cut until it is declared: nothing closes a connection, so that is the ranks'
 * collective timeout (--timeout-ms, the ranks' init() timeout; a rank on node a exits
 * with ERR_TIMEOUT and its launcher fails the attempt); then it heals, and node b's
 * launcher, whose connections survived, joins the next round. Detect is therefore about
 * --timeout-ms. If nothing declares it within --timeout-ms +
 * 15 s the link heals anyway and the row is the stall alone (restart: false).
 *
 * --json writes { machine, stepMs, rows }; with --merge, rows already in that file for
 * other (ranks, fault, restore) keys are kept and those measured now replace their key's.
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { createCluster, type Cluster, type NetNode, type Spawned } from '../../test/helpers/netns.js';
import { corpus } from '../../test/ft/fixture.js';
import { median } from '../stats.js';

const { values: o } = parseArgs({ options: {
  ranks: { type: 'string', default: '2,4' }, faults: { type: 'string', default: 'kill-rank,hang,kill-node,partition' },
  restore: { type: 'string', default: 'disk,memory,full' }, trials: { type: 'string', default: '3' },
  'step-ms': { type: 'string', default: '40' }, 'timeout-ms': { type: 'string', default: '20000' }, json: { type: 'string' }, merge: { type: 'boolean', default: false },
} });
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.join(ROOT, 'bin/nccl-node.js');
const FIXTURE = 'test/launch/fixtures/chaos-train.mts';
const ELASTIC_FIXTURE = 'test/launch/fixtures/chaos-elastic.mts';
const PORT = 29500;
const PHASES = ['detect', 'abort', 'rendezvous', 'restore', 'firstStep'] as const;

interface Line { t: number; text: string }
interface Row { ranks: number; fault: string; restore: string; trial: number; restart: boolean; sources?: string; totalMs: number | null; recomputed?: number; phases: Record<string, number | null>;
  /** partition: how long the link was cut, and the ranks' collective timeout that declares it. */
  cutMs?: number; timeoutMs?: number }

async function waitFor<T>(what: string, get: () => T | undefined, ms: number): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = get();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

async function trial(cluster: Cluster, ranks: number, fault: string, restore: string, trialNo: number): Promise<Row> {
  const [a, b] = cluster.nodes as [NetNode, NetNode];
  const work = mkdtempSync(path.join(os.tmpdir(), 'ft-recovery-'));
  const shmRoot = mkdtempSync('/dev/shm/ft-recovery-');
  const reports = path.join(work, 'reports');
  mkdirSync(reports);
  const lines: Line[] = [];
  const inProcess = restore === 'in-process';
  const env = { ...process.env, NCCL_NODE_TOKEN: 'ft-bench', CHAOS_STEPS: '400', CHAOS_STEP_MS: o['step-ms'], CHAOS_REPORTS: reports,
    CHAOS_CKPT_DIR: path.join(work, 'ckpt'), CHAOS_CKPT_EVERY: '4', CHAOS_TIMEOUT_MS: o['timeout-ms'], ...(restore === 'memory' ? { CHAOS_MEM_EVERY: '1' } : {}),
    ...(inProcess ? { CHAOS_DATASET: await corpus(), CHAOS_WINDOW_MS: '1000' } : {}) };
  const flags = ['--prefix', '--nnodes', '2', '--nproc-per-node', String(ranks / 2), '--rdzv-backend', 'c10d', '--rdzv-endpoint', `${a.addr}:${PORT}`,
    '--max-restarts', restore === 'full' ? '0' : '3', '--heartbeat-interval', '0.25', '--heartbeat-timeout', '1', '--grace-period', '1',
    '--join-timeout', '30', '--rdzv-last-call', '0.5', ...(inProcess ? ['--restart-scope', 'rank'] : [])];
  // Each node's in-memory snapshot files in a tmpfs directory of its own: the namespaces share
  // one /dev/shm, and a killed node must lose its memory as a real one would.
  const shm = (n: NetNode): string => path.join(shmRoot, n === a ? 'node0' : 'node1');
  const launch = (n: NetNode): Spawned => {
    mkdirSync(shm(n), { recursive: true });
    const s = cluster.spawnOn(n, process.execPath, [BIN, 'run', ...flags, inProcess ? ELASTIC_FIXTURE : FIXTURE],
      { cwd: ROOT, env: { ...env, NCCL_NODE_INMEMORY_DIR: shm(n) }, timeoutMs: 120_000 });
    for (const st of [s.child.stdout!, s.child.stderr!]) {
      let rest = '';
      st.on('data', (d: Buffer) => {
        const parts = (rest + d.toString()).split('\n');
        rest = parts.pop()!;
        for (const text of parts) lines.push({ t: Date.now(), text });
      });
    }
    return s;
  };
  const tail = (): string => lines.slice(-25).map((l) => l.text).join('\n');
  const step = (l: Line): number | undefined => { const m = /^\[0\] step (\d+) loss/.exec(l.text); return m ? Number(m[1]) : undefined; };
  const after = (t: number, re: RegExp): Line | undefined => lines.find((l) => l.t >= t && re.test(l.text));
  try {
    launch(a);
    launch(b);
    await waitFor('step 9', () => lines.find((l) => (step(l) ?? -1) >= 9), 60_000);
    const procs = readdirSync(reports).map((f) => JSON.parse(readFileSync(path.join(reports, f), 'utf8')) as { pid: number; rank: number });
    const victim = procs.find((p) => p.rank === ranks - 1)!; // a rank on node b
    const tf = Date.now();
    // Steps rank 0 had finished at the fault: what a recovery that resumes earlier computes again.
    const done = Math.max(...lines.filter((l) => l.t <= tf).map((l) => step(l) ?? -1));
    const recomputed = (first: Line): number => Math.max(0, done + 1 - (step(first) ?? done + 1));
    // A collective timeout (a partition's declaration) is printed by the ranks: where every
    // rank of a node timed out at once their launcher has no rank left to stop, and without
    // restarts (full) it prints nothing until the job ends.
    const notice = /; stopping |missed heartbeats|is gone|attempt \d+ failed|restarting rank|ERR_TIMEOUT/;
    // In-process, a partition is declared by the survivors themselves: their collective times
    // out and they re-form without the cut node's ranks (a generation smaller than the gang).
    const shrink = (l: Line): boolean => inProcess && Number(/^\[0\] formed generation \d+ size (\d+)$/.exec(l.text)?.[1] ?? ranks) < ranks;
    const declared = (l: Line): boolean => notice.test(l.text) || shrink(l);
    if (fault === 'kill-rank') process.kill(victim.pid, 'SIGKILL');
    else if (fault === 'hang') process.kill(victim.pid, 'SIGSTOP');
    else if (fault === 'kill-node') {
      cluster.killNode(b);
      rmSync(shm(b), { recursive: true, force: true });
    }
    else {
      cluster.partition(b);
      try {
        // Cut until a launcher declares it (see the top), with a deadline.
        await waitFor('the partition declared', () => lines.find((l) => l.t >= tf && declared(l)), Number(o['timeout-ms']) + 15_000).catch(() => undefined);
      } finally {
        cluster.heal(b);
      }
    }
    const healed = Date.now();
    const detect = await waitFor('a notice or a step', () => lines.find((l) => l.t >= tf && declared(l))
      ?? (fault === 'partition' && Date.now() > healed + 5000 ? lines.find((l) => l.t > tf && step(l) !== undefined) : undefined), 60_000);
    // How long the link was cut (partition): the declaration comes while it is.
    const cut = fault === 'partition' ? { cutMs: healed - tf, timeoutMs: Number(o['timeout-ms']) } : {};
    const restart = declared(detect);
    const ph: Record<string, number | null> = Object.fromEntries(PHASES.map((p) => [p, null]));
    if (!restart) {
      const first = lines.find((l) => l.t > tf && step(l) !== undefined)!;
      return { ranks, fault, restore, trial: trialNo, restart, ...cut, totalMs: first.t - tf, recomputed: recomputed(first), phases: { ...ph, firstStep: first.t - tf } };
    }
    ph.detect = detect.t - tf;
    let t = detect.t;
    if (inProcess && !/is gone|; stopping |attempt \d+ failed/.test(detect.text)) {
      // Only the lost rank restarts (a cut node's ranks: each when it fails after the heal):
      // the survivors shrink, then the group grows back.
      const formed = (size: number) => (l: Line): boolean => new RegExp(`^\\[0\\] formed generation \\d+ size ${size}$`).test(l.text);
      const shrunk = await waitFor('the shrink', () => lines.find((l) => l.t >= tf && shrink(l)), 30_000);
      ph.abort = Math.max(0, shrunk.t - t);
      const grown = await waitFor('the grow', () => lines.find((l) => l.t >= shrunk.t && formed(ranks)(l)), 60_000);
      ph.rendezvous = grown.t - shrunk.t;
      const first = await waitFor('the first step', () => lines.find((l) => l.t >= grown.t && step(l) !== undefined), 60_000);
      ph.firstStep = first.t - grown.t;
      return { ranks, fault, restore, trial: trialNo, restart, ...cut, totalMs: first.t - tf, recomputed: recomputed(first), phases: ph };
    }
    if (restore === 'full') {
      // A torchrun-style restart: every launcher goes, then all start again from disk.
      cluster.killAll();
      ph.abort = Date.now() - t;
      t = Date.now();
      launch(a);
      launch(b);
    } else {
      if (fault === 'kill-node') {
        await waitFor('the failed attempt', () => after(tf, /attempt \d+ failed/), 30_000);
        launch(b);
      }
      const ab = await waitFor('the abort', () => after(tf, /attempt \d+ failed/), 30_000);
      ph.abort = ab.t - t;
      t = ab.t;
    }
    const formed = await waitFor('the new gang', () => after(t, /formed|resumed from|restored step/), 60_000);
    if (/formed/.test(formed.text)) {
      ph.rendezvous = formed.t - t;
      t = formed.t;
    }
    const restored = await waitFor('the restore', () => after(t, /resumed from|restored step|^\[0\] step 0 /), 60_000);
    ph.restore = restored.t - t;
    const first = await waitFor('the first step', () => lines.find((l) => l.t >= restored.t && step(l) !== undefined && l !== restored), 60_000);
    ph.firstStep = first.t - restored.t;
    // train()'s own line ("restored step N (memory; ranks: memory peer ...)") or the fixture's ("... from a,b").
    const said = /restored step \d+ (?:from (\S+)|\(\w+; ranks: ([^)]*)\))/.exec(restored.text);
    const sources = said?.[1] ?? said?.[2]?.split(' ').join(',');
    return { ranks, fault, restore, trial: trialNo, restart, ...cut, ...(sources ? { sources } : {}), totalMs: first.t - tf, recomputed: recomputed(first), phases: ph };
  } catch (err) {
    throw new Error(`${ranks} ranks, ${fault}, ${restore}: ${(err as Error).message}; the last lines:\n${tail()}`);
  } finally {
    cluster.killAll();
    cluster.heal();
    rmSync(work, { recursive: true, force: true });
    rmSync(shmRoot, { recursive: true, force: true });
  }
}

const medianOrNull = (xs: number[]): number | null => (xs.length ? median(xs) : null);
const cluster = createCluster(2, 'b');
const rows: Row[] = [];
try {
  for (const ranks of o.ranks.split(',').map(Number)) {
    for (const fault of o.faults.split(',')) {
      for (const restore of o.restore.split(',')) {
        for (let i = 0; i < Number(o.trials); i++) {
          const r = await trial(cluster, ranks, fault, restore, i);
          rows.push(r);
          process.stderr.write(`${JSON.stringify(r)}\n`);
        }
      }
    }
  }
} finally {
  cluster.destroy();
}
const fmt = (v: number | null): string => (v === null ? '-' : String(Math.round(v)));
console.log(`| ranks | fault | restore | restarts | ${PHASES.join(' | ')} | total (ms, median of ${o.trials}) | steps recomputed (median) |`);
console.log(`|---|---|---|---|${PHASES.map(() => '---').join('|')}|---|---|`);
const keys = [...new Set(rows.map((r) => `${r.ranks}|${r.fault}|${r.restore}`))];
for (const k of keys) {
  const rs = rows.filter((r) => `${r.ranks}|${r.fault}|${r.restore}` === k);
  const [ranks, fault, restore] = k.split('|');
  const m = (f: (r: Row) => number | null): string => fmt(medianOrNull(rs.map(f).filter((v): v is number => v !== null)));
  const src = [...new Set(rs.map((r) => r.sources).filter(Boolean))].join(' ');
  console.log(`| ${ranks} | ${fault} | ${restore}${src ? ` (${src})` : ''} | ${rs.filter((r) => r.restart).length}/${rs.length} | ${PHASES.map((p) => m((r) => r.phases[p] ?? null)).join(' | ')} | ${m((r) => r.totalMs)} | ${m((r) => r.recomputed ?? null)} |`);
}
if (o.json) {
  const key = (r: Row): string => `${r.ranks}|${r.fault}|${r.restore}`;
  const measured = new Set(rows.map(key));
  // --merge: a partial run (a few faults or restore paths) replaces only its own keys' rows.
  const old = o.merge && existsSync(o.json) ? (JSON.parse(readFileSync(o.json, 'utf8')) as { stepMs?: number; rows?: Row[] }) : undefined;
  if (old?.stepMs !== undefined && old.stepMs !== Number(o['step-ms'])) throw new Error(`${o.json} was measured with --step-ms ${old.stepMs}, not ${o['step-ms']}: not merged`);
  const kept = (old?.rows ?? []).filter((r) => !measured.has(key(r)));
  writeFileSync(o.json, `${JSON.stringify({ ...old, machine: { cpus: os.cpus().length }, stepMs: Number(o['step-ms']), rows: [...kept, ...rows] }, null, 2)}\n`);
}
