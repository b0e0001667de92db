/**
 * `nccl-node run`: starts this node's ranks of a job as one gang. One launcher hosts
 * the job's store (node 0; elastic: the first to bind the rendezvous port). Every rank
 * must join (init()) within the join timeout; when one rank fails, every rank on every
 * node is stopped. Then, with restarts left, every launcher joins a new rendezvous round
 * (rounds.ts) and the gang runs again with the next TORCHELASTIC_RESTART_COUNT in a store
 * scope of its own; otherwise each launcher exits with the failing rank's code. See
 * join.ts for the keys of one attempt. With --restart-scope rank a failed rank is
 * restarted alone while the others keep running (rank-restart.ts).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';

import { JOB_ID_ENV, launcherJobId, removeJobFiles, SNAPSHOT_DIR_ENV, DEFAULT_SNAPSHOT_DIR } from '../checkpoint/in-memory-files.js';
import { isNcclNodeError } from '../errors.js';
import { scopeKeyPrefix, scopedToken } from '../rendezvous/scope.js';
import type { StoreServer } from '../rendezvous/server.js';
import { CPUS_ENV } from './cpu-bind.js';
import { refusal } from './health-check.js';
import { HealthMonitor } from './health-monitor.js';
import { hostOrJoinStore } from './host.js';
import { doneKey, joinKey, publishFailure, watchFailure, watchJoins, type FailureRecord, type JoinInfo } from './join.js';
import { prefixedView, type KeyView } from './keyview.js';
import { resolveOptions, resolveToken, type LaunchOptions, type Resolved } from './options.js';
import { rankOutput } from './output.js';
import { GUARD_FD, nodeArgs, rankEnv } from './rank-process.js';
import { RankRestarts } from './rank-restart.js';
import { SPARE_ENV, SPARE_INDEX_ENV, SparePool, type SpareProcess, type Took } from './spares.js';
import { groupAlive, killGroup, signalExitCode } from './process-group.js';
import { EtcdRendezvous } from './etcd.js';
import { roundStore, watchGang } from './round-store.js';
import { CLOSED_KEY, Coordinator, joinRound, serverBackend, type Closed, type CoordinatorOptions, type Ticket } from './rounds.js';

export type { LaunchOptions } from './options.js';

export interface LaunchResult {
  exitCode: number;
  /** One line saying how the job ended, e.g. "rank 2 (pid 42) exited with code 3; stopped ranks 0, 1, 3". */
  message: string;
  failure?: FailureRecord;
  /** An NcclNodeError code when the launcher itself failed (ERR_TIMEOUT: too few nodes came; ERR_STORE: the store was lost). */
  code?: string;
  /** Attempts made (1 + restarts). */
  attempts: number;
}

/** After SIGKILL, how long to wait for the kernel to report the exits. */
const KILL_WAIT_MS = 3_000;
/** How long to wait for a dead rank's output pipes to drain (a leftover grandchild may hold them). */
const DRAIN_WAIT_MS = 1_000;
/** How long a failure waits for the exits that came with it (see settleFailure). */
const SETTLE_WAIT_MS = 400;
/** How long the store's host, before blaming a local rank, watches for a node whose launcher vanished. */
const NODE_LOSS_WAIT_MS = 100;

interface Rank {
  rank: number;
  localRank: number;
  child: ChildProcess;
  pid: number | undefined;
  exit?: { code: number | null; signal: NodeJS.Signals | null };
  /** When this rank's end of the guard pair hung up, in order among all ranks (see settleFailure). */
  hangup?: number;
  /** The order in which Node reported the exits. */
  exitOrder?: number;
  drained: Promise<void>;
  /** --spares: the index of the spare this process was started as (it stays a spare until it takes a rank's place). */
  spare?: number;
}

/** A lost rank counting on a spare to take its place. */
interface AwaitingSpare {
  dead: Rank;
  record: FailureRecord;
  restarts: number;
  timer: NodeJS.Timeout;
}

/** How long a lost rank waits for the spare promised to it before it is restarted instead. */
const SPARE_TAKE_WAIT_MS = 30_000;


function listRanks(ranks: readonly number[]): string {
  return `${ranks.length === 1 ? 'rank' : 'ranks'} ${ranks.join(', ')}`;
}

function seconds(ms: number): string {
  return `${Number((ms / 1000).toFixed(3))} s`;
}

const launcherName = (id: string): string => `nccl-node run (launcher ${id}, ${os.hostname()})`;

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Failures after which the gang is not re-run: the launcher was told to stop, the store or the rendezvous is gone. */
const FINAL_REASONS = new Set<FailureRecord['reason']>(['interrupted', 'store-lost', 'rendezvous']);

export class Launcher {
  /**
   * rendezvous: waiting for a round's ticket (a spare waits here); running: ranks up;
   * finishing: all local ranks exited 0 (the store's host may wait for others);
   * stopping: a failure is being handled.
   */
  private phase: 'rendezvous' | 'running' | 'finishing' | 'stopping' | 'done' = 'rendezvous';
  private ranks: Rank[] = [];
  /** Aborted when the attempt ends: its watches stop. */
  private watchers = new AbortController();
  /** This attempt's heartbeat watch over the local ranks (health-monitor.ts). */
  private monitor: HealthMonitor | undefined;
  /** Aborted on an interrupt while waiting for a round. */
  private readonly rendezvousAbort = new AbortController();
  /** Which attempt runs (TORCHELASTIC_RESTART_COUNT) and this node's place in its gang. */
  private attempt = 0;
  private gang: Ticket | undefined;
  /** The store as this attempt's ranks see it (a scope of its own after a restart). */
  private view: KeyView;
  private arrivals = 0;
  private lastFailure: LaunchResult | undefined;
  private coordinator: Coordinator | undefined;
  private readonly pendingWrites = new Set<Promise<unknown>>();
  private interrupts = 0;
  private hangups = 0;
  private exits = 0;
  private settling = false;
  /** --restart-scope rank: which ranks were restarted alone, and whether one may be. */
  private readonly rankRestarts: RankRestarts;
  /** Previous lives of ranks restarted alone (their pipes are closed when the attempt ends). */
  private retired: Rank[] = [];
  /** --spares: this attempt's spares (spares.ts), the processes not adopted as ranks, and lost ranks counting on one. */
  private pool: SparePool | undefined;
  private spareProcs: Rank[] = [];
  private readonly awaiting = new Map<number, AwaitingSpare>();
  /** The token this attempt's ranks reach the store with. */
  private rankToken = '';
  private resolveDone!: (r: LaunchResult) => void;
  /** Settles once every local rank is gone and the store is closed. */
  readonly done: Promise<LaunchResult>;
  private readonly host = os.hostname();
  /** The ranks' NCCL_NODE_JOB_ID: given, or derived from the job's token and run id (the same across restarts). */
  private get jobId(): string {
    return this.o.env[JOB_ID_ENV] || launcherJobId(this.token, this.o.runId);
  }
  private readonly killOnExit = (): void => {
    // Last resort if the launcher dies of an exception: no rank outlives it.
    for (const r of [...this.ranks, ...this.spareProcs]) if (r.pid !== undefined) killGroup(r.pid, 'SIGKILL');
  };

  /** The ranks' store: the whole store (c10d), or the attempt's own store (etcd: round-store.ts). */
  private storeView: KeyView;
  /** Where ranks reach their store (etcd: the attempt's store host). */
  private storeHost: string;

  private constructor(
    private readonly o: Resolved,
    private readonly token: string,
    /** The port ranks connect to (the real one when 0 was asked for). */
    public port: number,
    /** Where the launchers' own keys live: the whole store, or etcd. */
    private readonly baseView: KeyView,
    private server: StoreServer | undefined,
    /** Names this launcher in the rendezvous and on its store connections (how the host sees it is alive). */
    private readonly id: string,
    private readonly etcd?: EtcdRendezvous,
  ) {
    this.view = baseView;
    this.storeView = baseView;
    this.storeHost = o.masterAddr;
    this.rankRestarts = new RankRestarts(o);
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
  }

  private get clientName(): string {
    return launcherName(this.id);
  }

  /**
   * Validates options, hosts or reaches the store, and starts this node's ranks (static
   * rendezvous) or joins the first round (elastic: the ranks start once it closes).
   */
  static async start(options: LaunchOptions): Promise<Launcher> {
    const o = resolveOptions(options);
    const token = resolveToken(o);
    const id = randomUUID();
    const co: CoordinatorOptions = {
      minNodes: o.minNodes,
      maxNodes: o.maxNodes,
      static: !o.elastic,
      lastCallMs: o.lastCallMs,
      joinTimeoutMs: o.joinTimeoutMs,
      selfId: id,
      log: (msg) => o.stderr.write(`nccl-node run: ${msg}\n`),
    };
    if (o.etcd) {
      const connectTimeoutMs = Math.min(o.joinTimeoutMs, 10_000);
      const etcd = await EtcdRendezvous.connect({ host: o.masterAddr, port: o.masterPort, runId: o.runId, leaseTtlS: o.leaseTtlS, connectTimeoutMs, id });
      const launcher = new Launcher(o, token, 0, etcd.view, undefined, id, etcd);
      // Whichever launcher holds etcd's leader key runs the rounds; rounds open on demand.
      etcd.campaign(() => (launcher.coordinator = new Coordinator(etcd.backend, { ...co, onDemand: true })));
      etcd.onLost((err) => launcher.etcdLost(err));
      process.on('exit', launcher.killOnExit);
      void launcher.rendezvous();
      return launcher;
    }
    const store = await hostOrJoinStore(o, token, launcherName(id));
    const launcher = new Launcher(o, token, store.port, store.view, store.server, id);
    if (store.server !== undefined) {
      launcher.coordinator = new Coordinator(serverBackend(store.server), {
        ...co,
        onNodeLost: (attempt, nodeRank, member) => launcher.nodeLost(attempt, nodeRank, member),
      });
    }
    process.on('exit', launcher.killOnExit);
    if (o.elastic) {
      launcher.coordinator?.open(0);
      void launcher.rendezvous();
    } else {
      // The first attempt of a static job needs no round: every node knows its place.
      const worldSize = o.nnodes * o.nprocPerNode;
      const ticket = { attempt: 0, nodeRank: o.nodeRank, nnodes: o.nnodes, worldSize, rankOffset: o.nodeRank * o.nprocPerNode, members: [] };
      if (!o.healthCheck) launcher.begin(ticket);
      else void launcher.refused().then((refused) => {
        if (!refused && launcher.phase === 'rendezvous') launcher.begin(ticket);
      });
    }
    return launcher;
  }

  /** The running attempt's world size (0 while waiting for a round). */
  get worldSize(): number {
    return this.gang?.worldSize ?? 0;
  }

  /** Pids of this node's ranks, in local-rank order. */
  get pids(): Array<number | undefined> {
    return this.ranks.map((r) => r.pid);
  }

  /** Handles SIGINT/SIGTERM sent to the launcher: stop every rank; a second one kills at once. */
  interrupt(signal: NodeJS.Signals): void {
    this.interrupts++;
    if (this.phase === 'rendezvous') {
      this.lastFailure = undefined;
      this.rendezvousAbort.abort();
      void this.finalize({ exitCode: signalExitCode(signal), message: `launcher received ${signal} while waiting for a rendezvous round`, attempts: this.attempt });
      return;
    }
    if (this.phase === 'stopping') {
      if (this.interrupts > 1) for (const r of this.ranks) if (r.pid !== undefined) killGroup(r.pid, 'SIGKILL');
      return;
    }
    if (this.phase === 'done') return;
    this.fail({
      reason: 'interrupted',
      signal,
      exitCode: signalExitCode(signal),
      node: this.nodeRank,
      host: this.host,
      message: `launcher received ${signal}`,
    }, true);
  }

  private get nodeRank(): number {
    return this.gang?.nodeRank ?? this.o.nodeRank;
  }

  /** Starts this node's ranks of the attempt `ticket` describes. */
  private begin(ticket: Ticket): void {
    this.gang = ticket;
    this.attempt = ticket.attempt;
    this.ranks = [];
    this.watchers = new AbortController();
    this.hangups = 0;
    this.exits = 0;
    this.settling = false;
    this.rankRestarts.reset();
    this.phase = 'running';
    // After a restart the ranks get a store scope of their own: nothing of the failed attempt is in their way.
    const scope = ticket.attempt === 0 ? undefined : `attempt_${ticket.attempt}`;
    this.view = scope === undefined ? this.storeView : prefixedView(this.storeView, scopeKeyPrefix(scope));
    this.startRanks(scope === undefined ? this.token : scopedToken(this.token, scope));
    this.startSpares();
  }

  /** --spares: starts this node's spares of the attempt, watched through its store view. */
  private startSpares(): void {
    this.pool = undefined;
    if (this.o.spares === 0) return;
    const pool = new SparePool(this.view, this.nodeRank, {
      spawn: (index): SpareProcess => {
        const p = this.spawnRank(this.worldSize + index, this.o.nprocPerNode + index, 0, index);
        this.spareProcs.push(p);
        return { index, pid: p.pid, exited: () => p.exit !== undefined, ready: false };
      },
      took: (s, took) => this.spareTook(s, took),
      log: (line) => this.o.stderr.write(`nccl-node run: ${line}\n`),
    }, this.watchers.signal);
    this.pool = pool;
    for (let i = 0; i < this.o.spares; i++) pool.start('(idle until a rank is lost)');
  }

  private startRanks(rankToken: string): void {
    this.rankToken = rankToken;
    for (let localRank = 0; localRank < this.o.nprocPerNode; localRank++) this.ranks.push(this.spawnRank(this.gang!.rankOffset + localRank, localRank, 0));
    this.watch();
  }

  /**
   * Starts one rank process; `restarts`: how many times it was restarted alone before.
   * With `spare`, a spare worker instead: RANK and LOCAL_RANK past the world's, NCCL_NODE_FT_SPARE=1.
   */
  private spawnRank(rank: number, localRank: number, restarts: number, spare?: number): Rank {
    const o = this.o;
    const gang = this.gang!;
    const args = [...nodeArgs(o.script), o.script, ...o.scriptArgs];
    const base = rankEnv(o, { rank, localRank, worldSize: this.worldSize, nodeRank: gang.nodeRank, nnodes: gang.nnodes, attempt: gang.attempt,
      storeHost: this.storeHost, storePort: this.port, token: this.rankToken, restarts, jobId: this.jobId });
    const env = spare === undefined ? base : { ...base, [SPARE_ENV]: '1', [SPARE_INDEX_ENV]: String(spare) };
    const out = rankOutput({ ...o.output, attempt: gang.attempt, restart: restarts }, spare === undefined ? rank : `s${spare}`, localRank);
    // --cpu-bind: taskset binds, then execs node in the same process (same pid, same group).
    const cpus = spare === undefined ? o.cpuBinding?.cpus[localRank] : undefined;
    const [file, argv] = cpus === undefined ? [process.execPath, args] : [o.cpuBinding!.taskset, ['-c', cpus, process.execPath, ...args]];
    if (cpus !== undefined) env[CPUS_ENV] = cpus;
    // detached: the rank leads its own process group (see process-group.ts).
    const child = spawn(file, argv, { cwd: o.cwd, env, detached: true, stdio: ['ignore', ...out.stdio, 'pipe'] });
    child.once('exit', (code, signal) => {
      r.exit = { code, signal };
      r.exitOrder = this.exits++;
      if (r.spare !== undefined && !this.ranks.includes(r)) this.onSpareExit(r);
      else this.onExit(r);
    });
    child.once('error', (err) => {
      // Only a failed spawn gets here without 'exit' following.
      if (child.pid !== undefined || r.exit !== undefined) return;
      o.stderr.write(`nccl-node run: could not start rank ${rank}: ${err.message}\n`);
      r.exit = { code: 127, signal: null };
      this.onExit(r);
    });
    const drained = out.connect(child.stdout, child.stderr, o.stdout, o.stderr);
    // Our end of the guard pair just has to stay open while we live.
    const guard = child.stdio[GUARD_FD];
    // It hangs up when the rank starts to exit (see settleFailure).
    const hungUp = (): void => {
      r.hangup ??= this.hangups++;
    };
    guard?.on('error', hungUp);
    guard?.on('end', hungUp);
    guard?.on('close', hungUp);
    guard?.on('data', () => {});
    const r: Rank = { rank, localRank, child, pid: child.pid, drained, ...(spare !== undefined ? { spare } : {}) };
    return r;
  }

  private watch(): void {
    const o = this.o;
    const signal = this.watchers.signal;
    // Node 0 watches every rank, so a node that never started is noticed; others watch their own.
    const expected = this.nodeRank === 0 ? [...Array(this.worldSize).keys()] : this.ranks.map((r) => r.rank);
    watchJoins(this.view, expected, o.joinTimeoutMs, signal).then(
      (missing) => {
        if (signal.aborted || missing.length === 0 || this.phase === 'stopping' || this.phase === 'done') return;
        this.fail({
          reason: 'join-timeout',
          missing,
          exitCode: 1,
          node: this.nodeRank,
          host: this.host,
          message: `${listRanks(missing)} did not join within ${seconds(o.joinTimeoutMs)} (--join-timeout)`,
        }, true);
      },
      (err: unknown) => this.onWatchError(err, signal),
    );
    const monitored = this.ranks.map((r) => ({ rank: r.rank, pid: r.pid, exited: () => r.exit !== undefined }));
    const health = { intervalMs: o.heartbeatIntervalMs, timeoutMs: o.heartbeatTimeoutMs, node: this.nodeRank, host: this.host };
    this.monitor = HealthMonitor.start(this.view, monitored, health, signal, (record) => {
      if (this.phase !== 'running' && this.phase !== 'finishing') return false;
      const r = this.ranks.find((x) => x.rank === record.rank);
      if (r?.pid !== undefined && !this.settling && this.rankRestarts.allowed(this.attempt)) {
        // Killed, its exit restarts it (restartAlone); its peers' connections to it close.
        this.rankRestarts.noteMissed(record);
        o.stderr.write(`nccl-node run: ${record.message}; killing it (SIGKILL)\n`);
        killGroup(r.pid, 'SIGKILL');
        return true;
      }
      this.fail(record, true);
      return false;
    });
    watchFailure(this.view, signal).then(
      (record) => {
        if (signal.aborted || this.phase === 'stopping' || this.phase === 'done') return;
        this.fail(record, false);
      },
      (err: unknown) => this.onWatchError(err, signal),
    );
    if (this.etcd !== undefined) {
      const attempt = this.attempt;
      watchGang(this.etcd, this.gang!, this.id, this.view, signal, (nodeRank, m) => this.nodeLost(attempt, nodeRank, m, 'its etcd lease expired'));
    }
  }

  private onWatchError(err: unknown, signal: AbortSignal): void {
    if (signal.aborted || this.phase === 'stopping' || this.phase === 'done') return;
    // Nothing is lost for a node whose ranks all succeeded. The store's host closes the store
    // once every rank's done key is in, and that close, seen on a waiting connection, can
    // overtake the reply to this node's own last done write, which travels on another.
    if (this.finishIfAllSucceeded()) return;
    // Only a launcher that does not host the store can lose it.
    this.fail(this.storeLost(err), true);
  }

  /** When every local rank exited 0: a launcher still running goes on to finish(); true. Else false. */
  private finishIfAllSucceeded(): boolean {
    if (!this.ranks.every((r) => r.exit?.code === 0)) return false;
    if (this.phase === 'running') void this.finish();
    return true;
  }

  private storeLost(err: unknown): FailureRecord {
    const what = isNcclNodeError(err) ? err.message : String(err);
    if (this.etcd !== undefined && this.view !== this.baseView) {
      // The attempt's store went with its host: a node failure, and the next round elects another host.
      return { reason: 'node-lost', exitCode: 1, node: 0, host: this.gang?.members[0]?.host ?? 'unknown',
        message: `lost the attempt's store at ${this.storeHost}:${this.port} hosted by node 0 (${what})` };
    }
    return {
      reason: 'store-lost',
      exitCode: 1,
      node: this.nodeRank,
      host: this.host,
      message: `lost the job's store at ${this.o.masterAddr}:${this.port} (ERR_STORE: ${what})`,
    };
  }

  /** The store's host saw a node of the running attempt vanish (its launcher's connections closed). */
  private nodeLost(attempt: number, nodeRank: number, member: Ticket['members'][number], why = 'its store connection closed'): void {
    if (attempt !== this.attempt || (this.phase !== 'running' && this.phase !== 'finishing')) return;
    // A node that hosts no store waits for no one once its ranks all succeeded (the store's
    // host waits for every done key, so a lost node still fails it). Node 0 leaves once every
    // done key is in, and the news of its lease going can come before this launcher has seen
    // its own last done write answered or has finished reaping: nothing is lost here.
    if (this.server === undefined && this.finishIfAllSucceeded()) return;
    this.fail({
      reason: 'node-lost',
      exitCode: 1,
      node: nodeRank,
      host: member.host,
      message: `the launcher of node ${nodeRank} is gone (${why})`,
    }, true);
  }

  /** This launcher's etcd lease is gone: it is out of the job (waits for a round reject on their own). */
  private etcdLost(err: Error): void {
    if (this.phase !== 'running' && this.phase !== 'finishing') return;
    this.fail({ reason: 'store-lost', exitCode: 1, node: this.nodeRank, host: this.host, message: err.message }, true);
  }

  private onExit(r: Rank): void {
    if (this.phase !== 'running' || !this.ranks.includes(r)) return;
    if (r.exit?.code === 0) {
      this.track(this.rankSucceeded(r));
      return;
    }
    if (this.restartAlone(r)) return;
    if (!this.settling) {
      this.settling = true;
      void this.settleFailure();
    }
  }

  /** --restart-scope rank: starts a new life of failed rank `r` alone when allowed (rank-restart.ts). */
  private restartAlone(r: Rank): boolean {
    if (this.settling || !this.rankRestarts.allowed(this.attempt, r.exit)) return false;
    const record = this.rankRestarts.failureOf(r.rank, r.pid, r.exit!, { node: this.nodeRank, host: this.host });
    const spare = this.pool?.claim() ?? false;
    const { restarts, line } = this.rankRestarts.take(record, this.attempt, spare ? `an idle spare takes rank ${r.rank}'s place` : undefined);
    this.o.stderr.write(`nccl-node run: ${line}\n`);
    // Whatever the dead rank started goes with it.
    if (r.pid !== undefined && groupAlive(r.pid)) killGroup(r.pid, 'SIGKILL');
    if (!spare) {
      this.replaceRank(r, this.spawnRank(r.rank, r.localRank, restarts), record, restarts);
      return true;
    }
    // The survivors' round learns at once that this life is over (src/ft/gone.ts) and admits the spare.
    this.track(this.rankRestarts.publish(this.view, record, restarts, undefined).catch(() => {}));
    const timer = setTimeout(() => this.spareMissed(r.rank), Math.min(this.o.joinTimeoutMs, SPARE_TAKE_WAIT_MS));
    this.awaiting.set(r.rank, { dead: r, record, restarts, timer });
    return true;
  }

  /** `next` takes dead rank `dead`'s slot: monitored under its rank, recorded in the store. */
  private replaceRank(dead: Rank, next: Rank, record: FailureRecord, restarts: number): void {
    this.ranks[this.ranks.indexOf(dead)] = next;
    this.retired.push(dead);
    this.monitor?.replace({ rank: next.rank, pid: next.pid, exited: () => next.exit !== undefined }, dead.pid);
    this.track(this.rankRestarts.publish(this.view, record, restarts, next.pid).catch(() => {}));
  }

  /** Spare `s` took `took.rank`'s place in the group: it is that rank now, and a new spare starts. */
  private spareTook(s: SpareProcess, took: Took): void {
    const p = this.spareProcs.find((x) => x.spare === s.index);
    const w = this.awaiting.get(took.rank);
    if (p === undefined || this.phase !== 'running') return;
    if (w === undefined || !this.ranks.includes(w.dead)) {
      this.o.stderr.write(`nccl-node run: warning: spare s${s.index} (pid ${p.pid ?? 0}) took the place of rank ${took.rank}, which no lost rank of this node waited for\n`);
      return;
    }
    clearTimeout(w.timer);
    this.awaiting.delete(took.rank);
    this.spareProcs.splice(this.spareProcs.indexOf(p), 1);
    p.rank = took.rank;
    p.localRank = w.dead.localRank;
    this.replaceRank(w.dead, p, w.record, w.restarts);
    this.o.stderr.write(`nccl-node run: spare s${s.index} (pid ${p.pid ?? 0}) took rank ${took.rank}'s place (life ${took.life})\n`);
    this.pool?.start(`to replace spare s${s.index}`);
    if (p.exit !== undefined) this.onExit(p);
  }

  /** The spare promised to lost rank `rank` did not come: the rank is restarted alone instead. */
  private spareMissed(rank: number): void {
    const w = this.awaiting.get(rank);
    if (w === undefined || this.phase !== 'running' || !this.ranks.includes(w.dead)) return;
    this.awaiting.delete(rank);
    this.pool?.unclaim();
    this.o.stderr.write(`nccl-node run: no spare took rank ${rank}'s place within ${seconds(Math.min(this.o.joinTimeoutMs, SPARE_TAKE_WAIT_MS))}; restarting rank ${rank}\n`);
    this.replaceRank(w.dead, this.spawnRank(w.dead.rank, w.dead.localRank, w.restarts), w.record, w.restarts);
  }

  /** A spare that ended before taking a place: not a rank, so not a failure. */
  private onSpareExit(r: Rank): void {
    if (this.phase !== 'running') return;
    const how = r.exit?.signal != null ? `was killed by signal ${r.exit.signal}` : `exited with code ${r.exit?.code}`;
    this.o.stderr.write(`nccl-node run: spare s${r.spare} (pid ${r.pid ?? 0}) ${how}; it held no rank\n`);
  }

  /** Ends the attempt's spares that hold no rank (SIGTERM, SIGKILL after the grace period); their exits are no failure. */
  private async stopSpares(): Promise<void> {
    for (const w of this.awaiting.values()) clearTimeout(w.timer);
    this.awaiting.clear();
    this.pool = undefined;
    const procs = this.spareProcs.splice(0);
    if (procs.length === 0) return;
    this.retired.push(...procs);
    const groups = procs.flatMap((p) => (p.pid === undefined ? [] : [p.pid]));
    for (const g of groups) if (groupAlive(g)) killGroup(g, 'SIGTERM');
    const gone = (): boolean => procs.every((p) => p.exit !== undefined) && !groups.some(groupAlive);
    const deadline = Date.now() + this.o.gracePeriodMs;
    while (!gone() && Date.now() < deadline) await sleep(20);
    if (!gone()) {
      for (const g of groups) if (groupAlive(g)) killGroup(g, 'SIGKILL');
      const killDeadline = Date.now() + KILL_WAIT_MS;
      while (!gone() && Date.now() < killDeadline) await sleep(20);
    }
  }

  /**
   * Names the rank whose failure came first. Two things hide the order:
   * - Node reports the exits of children reaped together (a busy launcher) in spawn
   *   order, not in the order they died.
   * - A rank killed by a signal dies at once, but the kernel takes tens of ms to tear
   *   down a large process before its exit (and its guard's hang-up) can be seen; its
   *   peers notice the dropped connections meanwhile and exit with a code of their own.
   * So a failure waits briefly for the others that come with it; a death by signal
   * (never ours: we signal only once a failure is decided) is taken as the cause over
   * exits with a code, and within each kind the guards' hang-up order decides.
   */
  private async settleFailure(): Promise<void> {
    const byKill = (r: Rank): boolean => r.exit !== undefined && r.exit.signal !== null;
    const unsettled = (r: Rank): boolean =>
      (r.hangup !== undefined && r.exit === undefined)
      || (r.exit !== undefined && r.hangup === undefined && r.child.stdio[GUARD_FD] != null && !r.child.stdio[GUARD_FD].destroyed);
    const deadline = Date.now() + SETTLE_WAIT_MS;
    const waiting = (): boolean =>
      this.ranks.some(unsettled) || (!this.ranks.some(byKill) && this.ranks.some((r) => r.exit === undefined));
    while (waiting() && Date.now() < deadline && this.phase === 'running') await sleep(5);
    // On the store's host: when a whole node vanished, its store connections closed as its
    // ranks' did, and local ranks that died of the lost peers are not the cause. The
    // coordinator polls the connections; look now, and briefly (that node's launcher may go
    // a few ms after its ranks), before blaming a local rank.
    if (this.coordinator !== undefined && (this.gang?.members.length ?? 0) > 1 && !this.ranks.some(byKill)) {
      const until = Date.now() + NODE_LOSS_WAIT_MS;
      for (;;) {
        if (this.phase === 'running') this.coordinator.checkMembers();
        if (this.phase !== 'running' || Date.now() >= until) break;
        await sleep(5);
      }
    }
    if (this.phase !== 'running') return;
    const failed = this.ranks.filter((x) => x.exit !== undefined && x.exit.code !== 0);
    const order = (x: Rank): number => x.hangup ?? Number.MAX_SAFE_INTEGER;
    failed.sort((a, b) => Number(byKill(b)) - Number(byKill(a)) || order(a) - order(b) || (a.exitOrder ?? 0) - (b.exitOrder ?? 0));
    const r = failed[0];
    if (r === undefined) return;
    const { code, signal } = r.exit ?? { code: null, signal: null };
    const pid = r.pid ?? 0;
    const base = { rank: r.rank, node: this.nodeRank, host: this.host, ...(r.pid !== undefined ? { pid } : {}) };
    if (signal !== null) {
      this.fail({ ...base, reason: 'signal', signal, exitCode: signalExitCode(signal), message: `rank ${r.rank} (pid ${pid}) was killed by signal ${signal}` }, true);
    } else {
      const exitCode = Math.min(255, Math.max(1, code ?? 1));
      this.fail({ ...base, reason: 'exit', exitCode, message: `rank ${r.rank} (pid ${pid}) exited with code ${code}` }, true);
    }
  }

  /** Records a clean exit in the store; a rank that never joined is then not missing. */
  private async rankSucceeded(r: Rank): Promise<void> {
    const ranks = this.ranks;
    const signal = this.watchers.signal;
    try {
      if (!(await this.view.has(joinKey(r.rank)))) {
        const info: JoinInfo = { pid: r.pid ?? 1, host: this.host, localRank: r.localRank, exitedBeforeJoin: true };
        await this.view.write(joinKey(r.rank), JSON.stringify(info));
      }
      await this.view.write(doneKey(r.rank), '0');
    } catch (err) {
      this.onWatchError(err, signal);
      return;
    }
    if (this.phase === 'running' && ranks === this.ranks && ranks.every((x) => x.exit?.code === 0)) void this.finish();
  }

  private track(p: Promise<unknown>): void {
    this.pendingWrites.add(p);
    void p.finally(() => this.pendingWrites.delete(p));
  }

  /** Every local rank exited 0. Node 0 keeps the store up until the other nodes' ranks are done too. */
  private async finish(): Promise<void> {
    this.phase = 'finishing';
    const o = this.o;
    let message = `all ${this.ranks.length} local ranks exited with code 0`;
    if (this.server !== undefined && this.worldSize > this.ranks.length) {
      const all = [...Array(this.worldSize).keys()].map(doneKey);
      try {
        await this.view.waitAll(all, o.exitBarrierTimeoutMs, this.watchers.signal);
        message = `all ${this.worldSize} ranks exited with code 0`;
      } catch (err) {
        if (this.phase !== 'finishing') return; // a failure elsewhere took over
        message += `; gave up waiting for the other nodes' ranks after ${seconds(o.exitBarrierTimeoutMs)} (${(err as Error).message})`;
        o.stderr.write(`nccl-node run: warning: ${message}\n`);
      }
    }
    if (this.phase !== 'finishing') return;
    await this.complete({ exitCode: 0, message, attempts: this.attempt + 1 });
  }

  /** Starts stopping everything because of `record`; `local` failures are published for other nodes. */
  private fail(record: FailureRecord, local: boolean): void {
    if (this.phase === 'stopping' || this.phase === 'done') return;
    this.phase = 'stopping';
    // A rank's own report of why it died goes into the record every rank and node sees.
    const annotated = local && this.monitor !== undefined ? this.monitor.annotate(record) : Promise.resolve(record);
    if (local) this.track(annotated.then((r) => publishFailure(this.view, r)).catch(() => false));
    void annotated.then((r) => this.stopAll(r));
  }

  private async stopAll(record: FailureRecord): Promise<void> {
    const o = this.o;
    const running = this.ranks.filter((r) => r.exit === undefined);
    if (running.length > 0) {
      o.stderr.write(`nccl-node run: ${record.message}; stopping ${listRanks(running.map((r) => r.rank))} (SIGTERM, then SIGKILL after ${seconds(o.gracePeriodMs)})\n`);
    }
    // Survivors abort their collectives on the published record before they are signalled.
    await this.monitor?.awaitAborts(running.filter((r) => r.rank !== record.rank).map((r) => r.rank));
    this.terminateGroups();
    await this.reap();
    const where = record.node !== this.nodeRank ? ` on node ${record.node} (${record.host})` : '';
    const stopped = running.length > 0 ? `stopped ${listRanks(running.map((r) => r.rank))}` : 'no other local ranks were running';
    await this.complete({
      exitCode: record.exitCode,
      message: `${record.message}${where}; ${stopped}`,
      failure: record,
      attempts: this.attempt + 1,
      ...(record.reason === 'store-lost' ? { code: 'ERR_STORE' } : {}),
    });
  }

  /** SIGTERM to every group still there: running ranks, and what exited ranks left behind. */
  private terminateGroups(): void {
    for (const r of this.ranks) if (r.pid !== undefined && groupAlive(r.pid)) killGroup(r.pid, 'SIGTERM');
  }

  /**
   * Waits for every rank and its process group to be gone, SIGKILLing whatever is
   * left after the grace period: no rank, and nothing a rank started, outlives us.
   */
  private async reap(): Promise<void> {
    const groups = this.ranks.flatMap((r) => (r.pid === undefined ? [] : [r.pid]));
    const allGone = (): boolean => this.ranks.every((r) => r.exit !== undefined) && !groups.some(groupAlive);
    const deadline = Date.now() + this.o.gracePeriodMs;
    while (!allGone() && Date.now() < deadline) await sleep(Math.min(50, Math.max(1, deadline - Date.now())));
    if (!allGone()) {
      for (const g of groups) if (groupAlive(g)) killGroup(g, 'SIGKILL');
      const killDeadline = Date.now() + KILL_WAIT_MS;
      while (!allGone() && Date.now() < killDeadline) await sleep(20);
    }
    await Promise.race([Promise.all(this.ranks.map((r) => r.drained)), sleep(DRAIN_WAIT_MS)]);
  }

  /** The attempt ended: re-run the gang if it failed and restarts remain, else end the job. */
  private async complete(result: LaunchResult): Promise<void> {
    if (this.phase === 'done' || this.phase === 'rendezvous') return;
    await this.stopSpares();
    if (result.exitCode === 0) {
      // Whatever successful ranks left running goes too.
      this.terminateGroups();
      await this.reap();
      // The job is done: its node-local in-memory snapshots are of no more use.
      const dir = this.o.env[SNAPSHOT_DIR_ENV];
      if (dir !== 'off') removeJobFiles(path.resolve(this.o.cwd, dir || DEFAULT_SNAPSHOT_DIR), this.jobId);
    }
    this.phase = 'rendezvous';
    this.watchers.abort();
    this.coordinator?.attemptEnded();
    // Let a failure record reach the store, briefly.
    await Promise.race([Promise.allSettled([...this.pendingWrites]), sleep(2_000)]);
    if (this.etcd !== undefined && result.exitCode !== 0) await this.dropRoundStore();
    for (const r of [...this.ranks, ...this.retired.splice(0)]) {
      r.child.stdout?.destroy();
      r.child.stderr?.destroy();
      r.child.stdio[GUARD_FD]?.destroy();
    }
    // Ranks restarted alone used up restarts too.
    const used = this.attempt + this.rankRestarts.count;
    const restart = result.exitCode !== 0 && !FINAL_REASONS.has(result.failure?.reason ?? 'error')
      && used < this.o.maxRestarts && this.interrupts === 0;
    if (!restart) {
      await this.finalize(result);
      return;
    }
    this.lastFailure = result;
    this.o.stderr.write(`nccl-node run: attempt ${this.attempt} failed: ${result.message}; restarting the gang (restart ${used + 1} of ${this.o.maxRestarts})\n`);
    this.coordinator?.open(this.attempt + 1);
    await this.rendezvous();
  }

  /** Waits for this launcher's place in the next round (or for the job's end), then starts its ranks. */
  private async rendezvous(): Promise<void> {
    this.phase = 'rendezvous';
    if ((await this.refused()) || this.phase !== 'rendezvous') return;
    const n = this.arrivals++;
    const arrival = {
      id: this.id,
      clientName: this.clientName,
      host: this.host,
      nproc: this.o.nprocPerNode,
      ...(this.o.elastic ? {} : { nodeRank: this.o.nodeRank }),
      ...(this.etcd !== undefined ? { attempt: this.gang === undefined ? 0 : this.attempt + 1, lease: this.etcd.leaseId } : {}),
    };
    let answer: { ticket: Ticket } | { closed: Closed };
    try {
      answer = await joinRound(this.baseView, arrival, n, this.rendezvousAbort.signal);
    } catch (err) {
      if (this.rendezvousAbort.signal.aborted || this.phase !== 'rendezvous') return; // interrupted: finalize runs
      const record = this.etcd !== undefined ? { ...this.storeLost(err), message: `lost etcd at ${this.etcd.endpoint} (ERR_STORE: ${(err as Error).message})` } : this.storeLost(err);
      await this.finalize({ exitCode: 1, message: `${record.message} while waiting for a rendezvous round`, failure: record, code: 'ERR_STORE', attempts: this.attempt });
      return;
    }
    if (this.phase !== 'rendezvous') return;
    if ('closed' in answer) {
      const c = answer.closed;
      const before = this.lastFailure !== undefined ? ` (the last attempt: ${this.lastFailure.message})` : '';
      const spare = this.gang === undefined && c.code === undefined ? 'the job ended while this node waited as a spare: ' : '';
      await this.finalize({
        exitCode: c.exitCode,
        message: `${spare}${c.message}${c.code !== undefined ? before : ''}`,
        ...(c.code !== undefined ? { code: c.code, failure: { reason: 'rendezvous', exitCode: Math.max(1, c.exitCode), node: this.nodeRank, host: this.host, message: c.message } } : {}),
        attempts: this.gang === undefined ? 0 : this.attempt + 1,
      });
      return;
    }
    if (this.etcd !== undefined && !(await this.joinRoundStore(answer.ticket))) return;
    this.begin(answer.ticket);
  }

  /** --health-check: a node that fails the self-test ends here, named, instead of joining a round. */
  private async refused(): Promise<boolean> {
    if (!this.o.healthCheck) return false;
    const why = await refusal(this.o, this.port, this.token, this.host);
    if (why === undefined || this.phase !== 'rendezvous') return false;
    this.o.stderr.write(`nccl-node run: ${why}\n`);
    await this.finalize({ exitCode: 1, code: 'ERR_LAUNCH', message: why, attempts: this.attempt });
    return true;
  }

  /** etcd: hosts or finds the attempt's store; a failure to is a failed attempt. */
  private async joinRoundStore(ticket: Ticket): Promise<boolean> {
    try {
      const store = await roundStore({
        etcd: this.etcd!, ticket, token: this.token, clientName: this.clientName, etcdHost: this.o.masterAddr, etcdPort: this.o.masterPort,
        timeoutMs: this.o.joinTimeoutMs, signal: this.rendezvousAbort.signal, log: (msg) => this.o.stderr.write(`nccl-node run: store: ${msg}\n`),
      });
      this.storeView = store.view;
      this.storeHost = store.host;
      this.port = store.port;
      this.server = store.server;
      return this.phase === 'rendezvous';
    } catch (err) {
      if (this.phase !== 'rendezvous') return false;
      this.gang = ticket;
      this.attempt = ticket.attempt;
      this.phase = 'running';
      this.fail({ reason: 'node-lost', exitCode: 1, node: 0, host: ticket.members[0]?.host ?? 'unknown', message: `no store for attempt ${ticket.attempt}: ${(err as Error).message}` }, false);
      return false;
    }
  }

  /** etcd: closes this attempt's store (its host) or the connection to it. */
  private async dropRoundStore(): Promise<void> {
    const view = this.storeView;
    const server = this.server;
    this.storeView = this.baseView;
    this.server = undefined;
    await Promise.race([Promise.allSettled([view === this.baseView ? undefined : view.close(), server?.close()]), sleep(3_000)]);
  }

  /**
   * etcd: a member whose job failed for good, or the attempt's store host once every rank
   * finished, writes the job's end for the spares; then its lease goes, and its keys with it.
   */
  private async etcdFinal(result: LaunchResult): Promise<void> {
    const etcd = this.etcd!;
    if (this.gang !== undefined && (result.exitCode !== 0 || this.server !== undefined) && result.failure?.reason !== 'store-lost') {
      const closed = JSON.stringify({ exitCode: result.exitCode, message: result.message, ...(result.code !== undefined ? { code: result.code } : {}) });
      await Promise.race([etcd.close(CLOSED_KEY, closed).catch(() => {}), sleep(3_000)]);
    }
    await this.dropRoundStore();
    await etcd.shutdown();
  }

  /** Ends the job for this launcher: tells waiting launchers (on the store's host), closes the store, resolves `done`. */
  private async finalize(result: LaunchResult): Promise<void> {
    if (this.phase === 'done') return;
    this.phase = 'done';
    this.rendezvousAbort.abort();
    // etcd: the job's end is written by its members (etcdFinal), not by a coordinator that may be a spare.
    if (this.etcd === undefined) this.coordinator?.close({ exitCode: result.exitCode, message: result.message, ...(result.code !== undefined ? { code: result.code } : {}) });
    this.coordinator?.stop();
    if (this.etcd !== undefined) await this.etcdFinal(result);
    await Promise.race([Promise.allSettled([this.baseView.close(), this.server?.close()]), sleep(3_000)]);
    process.off('exit', this.killOnExit);
    this.resolveDone(result);
  }
}
