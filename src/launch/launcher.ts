/**
 * `nccl-node run`: starts this node's ranks of a job as one gang. Node 0's launcher
 * hosts the job's store. Every rank must join (init()) within the join timeout;
 * when one rank fails, every rank on every node is stopped, and each launcher exits
 * with the failing rank's code. See join.ts for the keys involved.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import type { Writable } from 'node:stream';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { NcclNodeError, isNcclNodeError } from '../errors.js';
import { StoreServer } from '../rendezvous/server.js';
import { DEFAULT_MASTER_ADDR, DEFAULT_MASTER_PORT } from './env.js';
import { doneKey, joinKey, publishFailure, watchFailure, watchJoins, type FailureRecord, type JoinInfo } from './join.js';
import { clientView, serverView, type KeyView } from './keyview.js';
import { rankOutput, type OutputPolicy, type StdMask } from './output.js';
import { groupAlive, killGroup, signalExitCode } from './process-group.js';

export interface LaunchOptions {
  /** Path of a .js/.mjs/.cjs/.ts/.mts/.cts file, relative to `cwd`. */
  script: string;
  scriptArgs?: string[];
  nprocPerNode: number;
  nnodes?: number;
  nodeRank?: number;
  masterAddr?: string;
  /** 0 picks a free port (single node only). Default: 0 on one node (as torchrun --standalone), 29500 on several. */
  masterPort?: number;
  /** TORCHELASTIC_RUN_ID of the ranks, and the log directory's name. Default: a random UUID on one node, "none" on several (as torchrun). */
  runId?: string;
  joinTimeoutMs?: number;
  /** Between SIGTERM and SIGKILL when stopping ranks. */
  gracePeriodMs?: number;
  /** Prefix each output line with "[rank] " (default false, as torchrun). */
  prefix?: boolean;
  /** Where --redirects/--tee write each rank's output: <logDir>/<runId>_<random>/attempt_0/<local rank>/. */
  logDir?: string;
  /** torchrun's --redirects: per local rank, 0 none, 1 stdout, 2 stderr, 3 both go to the log files only. */
  redirects?: (localRank: number) => StdMask;
  /** torchrun's --tee: the same, to the log files and the console. */
  tee?: (localRank: number) => StdMask;
  /** Only these local ranks' output reaches the console (torchrun's --local-ranks-filter). */
  localRanksFilter?: Set<number>;
  /** How long node 0 keeps the store up for other nodes' ranks after its own finished. */
  exitBarrierTimeoutMs?: number;
  /** Base environment of the ranks; NCCL_NODE_TOKEN is read from it. Default process.env. */
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  /** Where prefixed rank output and launcher notes go. Default process.stdout / process.stderr. */
  stdout?: Writable;
  stderr?: Writable;
}

export interface LaunchResult {
  exitCode: number;
  /** One line saying how the job ended, e.g. "rank 2 (pid 42) exited with code 3; stopped ranks 0, 1, 3". */
  message: string;
  failure?: FailureRecord;
}

const SCRIPT_EXTENSIONS = ['.js', '.mjs', '.cjs', '.ts', '.mts', '.cts'];
const TS_EXTENSIONS = new Set(['.ts', '.mts', '.cts']);
/** The fd on which each rank sees its end of the orphan-guard socket pair. */
const GUARD_FD = 3;
/** After SIGKILL, how long to wait for the kernel to report the exits. */
const KILL_WAIT_MS = 3_000;
/** How long to wait for a dead rank's output pipes to drain (a leftover grandchild may hold them). */
const DRAIN_WAIT_MS = 1_000;
/** How long a failure waits for the exits that came with it (see settleFailure). */
const SETTLE_WAIT_MS = 400;

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
}

interface Resolved {
  script: string;
  scriptArgs: string[];
  nprocPerNode: number;
  nnodes: number;
  nodeRank: number;
  masterAddr: string;
  masterPort: number;
  runId: string;
  joinTimeoutMs: number;
  gracePeriodMs: number;
  prefix: boolean;
  output: OutputPolicy;
  exitBarrierTimeoutMs: number;
  env: NodeJS.ProcessEnv;
  cwd: string;
  stdout: Writable;
  stderr: Writable;
}

function invalid(message: string, details: Record<string, unknown> = {}): NcclNodeError {
  return new NcclNodeError('ERR_INVALID_ARGUMENT', message, details);
}

function checkInt(name: string, v: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (!Number.isInteger(v) || v < min || v > max) {
    throw invalid(`${name} must be an integer in [${min}, ${max}], got ${v}`, { option: name, received: v });
  }
  return v;
}

function checkMs(name: string, v: number, min: number): number {
  if (!Number.isFinite(v) || v < min) throw invalid(`${name} must be at least ${min} ms, got ${v}`, { option: name, received: v });
  return v;
}

function resolveOptions(o: LaunchOptions): Resolved {
  const cwd = o.cwd ?? process.cwd();
  const nnodes = checkInt('nnodes', o.nnodes ?? 1, 1);
  const nodeRank = checkInt('nodeRank', o.nodeRank ?? 0, 0, nnodes - 1);
  const masterAddr = o.masterAddr ?? DEFAULT_MASTER_ADDR;
  if (masterAddr.trim() === '') throw invalid('masterAddr must not be empty');
  const masterPort = checkInt('masterPort', o.masterPort ?? (nnodes === 1 ? 0 : DEFAULT_MASTER_PORT), 0, 65535);
  if (masterPort === 0 && nnodes > 1) {
    throw invalid('masterPort 0 (pick a free port) only works with a single node: other nodes could not know the port');
  }
  const script = path.resolve(cwd, o.script);
  const ext = path.extname(script);
  if (!SCRIPT_EXTENSIONS.includes(ext)) {
    throw invalid(`script must end in ${SCRIPT_EXTENSIONS.join(', ')}, got ${JSON.stringify(o.script)}`, { script: o.script });
  }
  if (!existsSync(script) || !statSync(script).isFile()) throw invalid(`script not found: ${script}`, { script });
  const runId = o.runId ?? (nnodes === 1 ? randomUUID() : 'none');
  if (!/^[\w.-]+$/.test(runId)) throw invalid(`runId must be letters, digits, "_", "." or "-", got ${JSON.stringify(runId)}`, { runId });
  const prefix = o.prefix ?? false;
  const redirects = o.redirects ?? ((): StdMask => 0);
  const tee = o.tee ?? ((): StdMask => 0);
  let runLogDir: string | undefined;
  if (o.logDir !== undefined) {
    const base = path.resolve(cwd, o.logDir);
    mkdirSync(base, { recursive: true });
    runLogDir = mkdtempSync(path.join(base, `${runId}_`));
  }
  return {
    script,
    scriptArgs: o.scriptArgs ?? [],
    nprocPerNode: checkInt('nprocPerNode', o.nprocPerNode, 1, 4096),
    nnodes,
    nodeRank,
    masterAddr,
    masterPort,
    runId,
    joinTimeoutMs: checkMs('joinTimeoutMs', o.joinTimeoutMs ?? 600_000, 1),
    gracePeriodMs: checkMs('gracePeriodMs', o.gracePeriodMs ?? 5_000, 0),
    prefix,
    output: { prefix, redirects, tee, ...(o.localRanksFilter ? { consoleRanks: o.localRanksFilter } : {}), ...(runLogDir ? { runLogDir } : {}), attempt: 0 },
    exitBarrierTimeoutMs: checkMs('exitBarrierTimeoutMs', o.exitBarrierTimeoutMs ?? 300_000, 0),
    env: o.env ?? process.env,
    cwd,
    stdout: o.stdout ?? process.stdout,
    stderr: o.stderr ?? process.stderr,
  };
}

/** Node 0 makes the token for a one-node job; several nodes must be given the same one. */
function resolveToken(o: Resolved): string {
  const given = o.env['NCCL_NODE_TOKEN'];
  if (given !== undefined && given !== '') return given;
  if (o.nnodes === 1) return randomBytes(32).toString('hex');
  throw invalid(
    `NCCL_NODE_TOKEN is not set: with --nnodes ${o.nnodes} every node's launcher needs the same secret token. ` +
      'Generate one (e.g. `openssl rand -hex 32`) and export it as NCCL_NODE_TOKEN on every node.',
    { variable: 'NCCL_NODE_TOKEN' },
  );
}

/** `node` arguments that load the orphan guard, and tsx where TypeScript must run. */
function nodeArgs(script: string): string[] {
  const here = fileURLToPath(import.meta.url);
  const ext = path.extname(here); // .ts when the launcher itself runs from source via tsx
  const preload = pathToFileURL(path.join(path.dirname(here), `preload${ext === '.ts' ? '.ts' : '.js'}`)).href;
  const args: string[] = [];
  if (ext === '.ts' || TS_EXTENSIONS.has(path.extname(script))) {
    // An absolute URL, so ranks find tsx whatever their cwd.
    args.push('--import', pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href);
  }
  args.push('--import', preload);
  return args;
}

function listRanks(ranks: readonly number[]): string {
  return `${ranks.length === 1 ? 'rank' : 'ranks'} ${ranks.join(', ')}`;
}

function seconds(ms: number): string {
  return `${Number((ms / 1000).toFixed(3))} s`;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export class Launcher {
  /** running: ranks up; finishing: all local ranks exited 0 (node 0 may wait for others); stopping: a failure is being handled. */
  private phase: 'running' | 'finishing' | 'stopping' | 'done' = 'running';
  private readonly ranks: Rank[] = [];
  private readonly watchers = new AbortController();
  private readonly pendingWrites = new Set<Promise<unknown>>();
  private interrupts = 0;
  private hangups = 0;
  private exits = 0;
  private settling = false;
  private resolveDone!: (r: LaunchResult) => void;
  /** Settles once every local rank is gone and the store is closed. */
  readonly done: Promise<LaunchResult>;
  private readonly host = os.hostname();
  private readonly killOnExit = (): void => {
    // Last resort if the launcher dies of an exception: no rank outlives it.
    for (const r of this.ranks) if (r.pid !== undefined) killGroup(r.pid, 'SIGKILL');
  };

  private constructor(
    private readonly o: Resolved,
    private readonly token: string,
    /** The port ranks connect to (the real one when 0 was asked for). */
    readonly port: number,
    private readonly view: KeyView,
    private readonly server: StoreServer | undefined,
  ) {
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
  }

  /** Validates options, hosts or reaches the store, and starts this node's ranks. */
  static async start(options: LaunchOptions): Promise<Launcher> {
    const o = resolveOptions(options);
    const token = resolveToken(o);
    let launcher: Launcher;
    if (o.nodeRank === 0) {
      // One node: listen where ranks will connect. Several: all interfaces, as the
      // address other nodes use may not be one we can bind (NAT); the token guards it.
      const server = await StoreServer.start({
        host: o.nnodes === 1 ? o.masterAddr : undefined,
        port: o.masterPort,
        token,
        log: (msg) => o.stderr.write(`nccl-node run: store: ${msg}\n`),
      });
      launcher = new Launcher(o, token, server.port, serverView(server), server);
    } else {
      const view = await clientView({
        host: o.masterAddr,
        port: o.masterPort,
        token,
        clientName: `nccl-node run (node ${o.nodeRank}, ${os.hostname()})`,
        connectTimeoutMs: o.joinTimeoutMs, // node 0 may come up later than us
      });
      launcher = new Launcher(o, token, o.masterPort, view, undefined);
    }
    launcher.startRanks();
    return launcher;
  }

  get worldSize(): number {
    return this.o.nnodes * this.o.nprocPerNode;
  }

  /** Pids of this node's ranks, in local-rank order. */
  get pids(): Array<number | undefined> {
    return this.ranks.map((r) => r.pid);
  }

  /** Handles SIGINT/SIGTERM sent to the launcher: stop every rank; a second one kills at once. */
  interrupt(signal: NodeJS.Signals): void {
    this.interrupts++;
    if (this.phase === 'stopping') {
      if (this.interrupts > 1) for (const r of this.ranks) if (r.pid !== undefined) killGroup(r.pid, 'SIGKILL');
      return;
    }
    if (this.phase === 'done') return;
    this.fail({
      reason: 'interrupted',
      signal,
      exitCode: signalExitCode(signal),
      node: this.o.nodeRank,
      host: this.host,
      message: `launcher received ${signal}`,
    }, true);
  }

  private startRanks(): void {
    const o = this.o;
    const args = [...nodeArgs(o.script), o.script, ...o.scriptArgs];
    process.on('exit', this.killOnExit);
    for (let localRank = 0; localRank < o.nprocPerNode; localRank++) {
      const rank = o.nodeRank * o.nprocPerNode + localRank;
      const env: NodeJS.ProcessEnv = {
        ...o.env,
        RANK: String(rank),
        WORLD_SIZE: String(this.worldSize),
        LOCAL_RANK: String(localRank),
        LOCAL_WORLD_SIZE: String(o.nprocPerNode),
        GROUP_RANK: String(o.nodeRank),
        GROUP_WORLD_SIZE: String(o.nnodes),
        // One role, "default", as torchrun without --role.
        ROLE_NAME: 'default',
        ROLE_RANK: String(rank),
        ROLE_WORLD_SIZE: String(this.worldSize),
        TORCHELASTIC_RUN_ID: o.runId,
        TORCHELASTIC_RESTART_COUNT: '0',
        TORCHELASTIC_MAX_RESTARTS: '0',
        MASTER_ADDR: o.masterAddr,
        MASTER_PORT: String(this.port),
        NCCL_NODE_TOKEN: this.token,
        NCCL_NODE_STORE_HOSTED: '1',
        NCCL_NODE_LAUNCHER: '1',
        NCCL_NODE_LAUNCHER_FD: String(GUARD_FD),
        NCCL_NODE_GRACE_MS: String(o.gracePeriodMs),
      };
      const output = rankOutput(o.output, rank, localRank);
      // detached: the rank leads its own process group (see process-group.ts).
      const child = spawn(process.execPath, args, { cwd: o.cwd, env, detached: true, stdio: ['ignore', ...output.stdio, 'pipe'] });
      child.once('exit', (code, signal) => {
        r.exit = { code, signal };
        r.exitOrder = this.exits++;
        this.onExit(r);
      });
      child.once('error', (err) => {
        // Only a failed spawn gets here without 'exit' following.
        if (child.pid !== undefined || r.exit !== undefined) return;
        o.stderr.write(`nccl-node run: could not start rank ${rank}: ${err.message}\n`);
        r.exit = { code: 127, signal: null };
        this.onExit(r);
      });
      const drained = output.connect(child.stdout, child.stderr, o.stdout, o.stderr);
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
      const r: Rank = { rank, localRank, child, pid: child.pid, drained };
      this.ranks.push(r);
    }
    this.watch();
  }

  private watch(): void {
    const o = this.o;
    const signal = this.watchers.signal;
    // Node 0 watches every rank, so a node that never started is noticed; others watch their own.
    const expected = o.nodeRank === 0 ? [...Array(this.worldSize).keys()] : this.ranks.map((r) => r.rank);
    watchJoins(this.view, expected, o.joinTimeoutMs, signal).then(
      (missing) => {
        if (missing.length === 0 || this.phase === 'stopping' || this.phase === 'done') return;
        this.fail({
          reason: 'join-timeout',
          missing,
          exitCode: 1,
          node: o.nodeRank,
          host: this.host,
          message: `${listRanks(missing)} did not join within ${seconds(o.joinTimeoutMs)} (--join-timeout)`,
        }, true);
      },
      (err: unknown) => this.onWatchError(err),
    );
    watchFailure(this.view, signal).then(
      (record) => {
        if (this.phase === 'stopping' || this.phase === 'done') return;
        this.fail(record, false);
      },
      (err: unknown) => this.onWatchError(err),
    );
  }

  private onWatchError(err: unknown): void {
    if (this.watchers.signal.aborted || this.phase === 'stopping' || this.phase === 'done') return;
    // Only a launcher on node > 0 can lose the store: node 0 hosts it.
    const what = isNcclNodeError(err) ? err.message : String(err);
    this.fail({
      reason: 'store-lost',
      exitCode: 1,
      node: this.o.nodeRank,
      host: this.host,
      message: `lost the job's store at ${this.o.masterAddr}:${this.port} (${what})`,
    }, true);
  }

  private onExit(r: Rank): void {
    if (this.phase !== 'running') return;
    if (r.exit?.code === 0) {
      this.track(this.rankSucceeded(r));
      return;
    }
    if (!this.settling) {
      this.settling = true;
      void this.settleFailure();
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
    if (this.phase !== 'running') return;
    const failed = this.ranks.filter((x) => x.exit !== undefined && x.exit.code !== 0);
    const order = (x: Rank): number => x.hangup ?? Number.MAX_SAFE_INTEGER;
    failed.sort((a, b) => Number(byKill(b)) - Number(byKill(a)) || order(a) - order(b) || (a.exitOrder ?? 0) - (b.exitOrder ?? 0));
    const r = failed[0];
    if (r === undefined) return;
    const { code, signal } = r.exit ?? { code: null, signal: null };
    const pid = r.pid ?? 0;
    const base = { rank: r.rank, node: this.o.nodeRank, host: this.host, ...(r.pid !== undefined ? { pid } : {}) };
    if (signal !== null) {
      this.fail({ ...base, reason: 'signal', signal, exitCode: signalExitCode(signal), message: `rank ${r.rank} (pid ${pid}) was killed by signal ${signal}` }, true);
    } else {
      const exitCode = Math.min(255, Math.max(1, code ?? 1));
      this.fail({ ...base, reason: 'exit', exitCode, message: `rank ${r.rank} (pid ${pid}) exited with code ${code}` }, true);
    }
  }

  /** Records a clean exit in the store; a rank that never joined is then not missing. */
  private async rankSucceeded(r: Rank): Promise<void> {
    try {
      if (!(await this.view.has(joinKey(r.rank)))) {
        const info: JoinInfo = { pid: r.pid ?? 1, host: this.host, localRank: r.localRank, exitedBeforeJoin: true };
        await this.view.write(joinKey(r.rank), JSON.stringify(info));
      }
      await this.view.write(doneKey(r.rank), '0');
    } catch (err) {
      this.onWatchError(err);
      return;
    }
    if (this.phase === 'running' && this.ranks.every((x) => x.exit?.code === 0)) void this.finish();
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
    if (o.nodeRank === 0 && o.nnodes > 1) {
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
    await this.complete({ exitCode: 0, message });
  }

  /** Starts stopping everything because of `record`; `local` failures are published for other nodes. */
  private fail(record: FailureRecord, local: boolean): void {
    if (this.phase === 'stopping' || this.phase === 'done') return;
    this.phase = 'stopping';
    if (local) this.track(publishFailure(this.view, record).catch(() => false));
    void this.stopAll(record);
  }

  private async stopAll(record: FailureRecord): Promise<void> {
    const o = this.o;
    const running = this.ranks.filter((r) => r.exit === undefined);
    if (running.length > 0) {
      o.stderr.write(`nccl-node run: ${record.message}; stopping ${listRanks(running.map((r) => r.rank))} (SIGTERM, then SIGKILL after ${seconds(o.gracePeriodMs)})\n`);
    }
    this.terminateGroups();
    await this.reap();
    const where = record.node !== o.nodeRank ? ` on node ${record.node} (${record.host})` : '';
    const stopped = running.length > 0 ? `stopped ${listRanks(running.map((r) => r.rank))}` : 'no other local ranks were running';
    await this.complete({ exitCode: record.exitCode, message: `${record.message}${where}; ${stopped}`, failure: record });
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

  private async complete(result: LaunchResult): Promise<void> {
    if (this.phase === 'done') return;
    if (result.exitCode === 0) {
      // Whatever successful ranks left running goes too.
      this.terminateGroups();
      await this.reap();
    }
    this.phase = 'done';
    this.watchers.abort();
    // Let a failure record reach the store before it closes, briefly.
    await Promise.race([Promise.allSettled([...this.pendingWrites]), sleep(2_000)]);
    for (const r of this.ranks) {
      r.child.stdout?.destroy();
      r.child.stderr?.destroy();
      r.child.stdio[GUARD_FD]?.destroy();
    }
    await Promise.race([Promise.allSettled([this.view.close(), this.server?.close()]), sleep(3_000)]);
    process.off('exit', this.killOnExit);
    this.resolveDone(result);
  }
}
