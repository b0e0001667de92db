/**
 * The launcher's options: what `nccl-node run` and library callers pass, checked and
 * completed with torchrun's defaults.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, statSync } from 'node:fs';
import path from 'node:path';
import type { Writable } from 'node:stream';

import { NcclNodeError } from '../errors.js';
import { gpuInfo } from '../gpu/info.js';
import { checkCpuBindMode, exclusiveBinding, type CpuBindMode } from './cpu-bind.js';
import { checkNumaBindingMode, numaBinding, type NumaBindingMode } from './numa-binding.js';
import { DEFAULT_MASTER_ADDR, DEFAULT_MASTER_PORT } from './env.js';
import type { OutputPolicy, StdMask } from './output.js';

export type RestartScope = 'gang' | 'rank';

export const SCRIPT_EXTENSIONS = ['.js', '.mjs', '.cjs', '.ts', '.mts', '.cts'];

export interface LaunchOptions {
  /** Path of a .js/.mjs/.cjs/.ts/.mts/.cts file, relative to `cwd`. */
  script: string;
  scriptArgs?: string[];
  nprocPerNode: number;
  /** A fixed number of nodes (static rendezvous); leave out with minNodes/maxNodes. */
  nnodes?: number;
  /** Static rendezvous only: this node's rank. */
  nodeRank?: number;
  /**
   * Elastic rendezvous (torchrun's --nnodes MIN:MAX): the gang is the nodes that
   * came to the round, node ranks in join order. Several nodes' launchers find each
   * other through the store on masterAddr:masterPort, hosted by the first to bind it.
   */
  minNodes?: number;
  maxNodes?: number;
  /** Elastic: once minNodes are there, wait this long for more before closing the round (torch's last_call_timeout). Default 30 s. */
  lastCallMs?: number;
  /**
   * Where the launchers meet: 'c10d' (default), the store one launcher hosts at
   * masterAddr:masterPort; 'etcd', an etcd server there (always elastic), which outlives
   * any one node (etcd.ts).
   */
  rdzvBackend?: 'c10d' | 'etcd';
  /** etcd: the TTL of each launcher's lease; a launcher not heard from for this long is out. Default 10 s. */
  leaseTtlMs?: number;
  /** Re-run the whole gang up to this many times after a failure (torchrun's --max-restarts). Default 0. */
  maxRestarts?: number;
  /**
   * What a failed rank restarts: 'gang' (default), every rank of every node; 'rank', only
   * that rank, the others left running to re-form their group in-process (src/ft); see
   * rank-restart.ts. Both count against maxRestarts.
   */
  restartScope?: RestartScope;
  /**
   * restartScope 'rank' only: idle worker processes kept up per node (spares.ts) that take
   * a failed rank's place in its group's next membership round. Default 0.
   */
  spares?: number;
  masterAddr?: string;
  /** 0 picks a free port (single node only). Default: 0 on one node (as torchrun --standalone), 29500 on several. */
  masterPort?: number;
  /** TORCHELASTIC_RUN_ID of the ranks, and the log directory's name. Default: a random UUID on one node, "none" on several (as torchrun). */
  runId?: string;
  joinTimeoutMs?: number;
  /** Between SIGTERM and SIGKILL when stopping ranks. */
  gracePeriodMs?: number;
  /** How often ranks heartbeat through the store (docs/launcher.md, "Failure detection"); 0: no heartbeats. Default 5 s. */
  heartbeatIntervalMs?: number;
  /** A rank whose heartbeat has not changed for this long is failed as hung. Default 3 intervals. */
  heartbeatTimeoutMs?: number;
  /** Run the node self-test (health-check.ts) before joining each rendezvous round; a failing node does not join. */
  healthCheck?: boolean;
  /**
   * 'exclusive': each local rank runs on its own share of the CPUs the launcher may use
   * in rank order, whatever GPUs the host has (cpu-bind.ts; mpirun's --bind-to core). Default 'none'.
   */
  cpuBind?: CpuBindMode;
  /**
   * torchrun's --numa-binding: local rank i on CPUs of the NUMA node of GPU i
   * (numa-binding.ts). Not with cpuBind. Default none.
   */
  numaBinding?: NumaBindingMode;
  /** numaBinding: every visible GPU's PCI address in CUDA's order. Default: the CUDA driver's (gpuInfo()). */
  gpuPciBusIds?: readonly string[];
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


export interface Resolved {
  script: string;
  scriptArgs: string[];
  nprocPerNode: number;
  /** Static: the node count; elastic: maxNodes (used only for defaults). */
  nnodes: number;
  nodeRank: number;
  elastic: boolean;
  /** The rendezvous lives in etcd at masterAddr:masterPort. */
  etcd: boolean;
  /** etcd lease TTL in whole seconds. */
  leaseTtlS: number;
  minNodes: number;
  maxNodes: number;
  lastCallMs: number;
  maxRestarts: number;
  restartScope: RestartScope;
  spares: number;
  masterAddr: string;
  masterPort: number;
  runId: string;
  joinTimeoutMs: number;
  gracePeriodMs: number;
  heartbeatIntervalMs: number;
  heartbeatTimeoutMs: number;
  healthCheck: boolean;
  /** cpuBind 'exclusive' or numaBinding: per local rank its CPU list and the taskset that applies it. */
  cpuBinding?: { taskset: string; cpus: string[] };
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

/** --cpu-bind or --numa-binding (at most one) as CPU lists per local rank, or no binding. */
function bindingOf(o: LaunchOptions, nproc: number, env: NodeJS.ProcessEnv): Resolved['cpuBinding'] {
  const cpuBind = checkCpuBindMode(o.cpuBind ?? 'none');
  if (o.numaBinding === undefined) return cpuBind === 'exclusive' ? exclusiveBinding(nproc, env) : undefined;
  const mode = checkNumaBindingMode(o.numaBinding);
  if (cpuBind !== 'none') throw invalid('cpuBind and numaBinding both bind ranks to CPUs: give one', { option: 'numaBinding' });
  return numaBinding(mode, o.gpuPciBusIds ?? driverGpus(), nproc, env);
}

/** The visible GPUs' PCI addresses, as the CUDA driver orders them in this process. */
function driverGpus(): string[] {
  const info = gpuInfo();
  if (!info.cuda) {
    throw new NcclNodeError('ERR_UNAVAILABLE', `--numa-binding finds each rank's GPU through the CUDA driver, which does not load here: ${info.cudaError ?? 'unknown reason'}`,
      { option: 'numaBinding' });
  }
  return info.gpus.map((g) => g.pciBusId);
}

function checkScope(v: string): RestartScope {
  if (v !== 'gang' && v !== 'rank') throw invalid(`restartScope must be 'gang' or 'rank', got ${JSON.stringify(v)}`, { option: 'restartScope', received: v });
  return v;
}

function checkSpares(v: number, scope: RestartScope, maxNodes: number): number {
  const n = checkInt('spares', v, 0, 4096);
  if (n > 0 && scope !== 'rank') {
    throw invalid(`spares (${n}) take a failed rank's place in its running group: they need restartScope 'rank' (--restart-scope rank), got ${JSON.stringify(scope)}`,
      { option: 'spares', received: n, restartScope: scope });
  }
  // A launcher adopts only its own spares; on several nodes another node's spare could take
  // a rank that no launcher then watches, and the rank would also be restarted: two holders.
  if (n > 0 && maxNodes > 1) {
    throw invalid(`spares (${n}) are supported on single-node jobs only, got up to ${maxNodes} nodes; use node-level spares (--nnodes MIN:MAX) across nodes`,
      { option: 'spares', received: n, nodes: maxNodes });
  }
  return n;
}

export function resolveOptions(o: LaunchOptions): Resolved {
  const cwd = o.cwd ?? process.cwd();
  const etcd = o.rdzvBackend === 'etcd';
  const elastic = o.minNodes !== undefined || o.maxNodes !== undefined || etcd;
  if (elastic && (o.nnodes !== undefined || o.nodeRank !== undefined)) {
    throw invalid('minNodes/maxNodes (elastic) and nnodes/nodeRank (static) exclude each other: elastic node ranks follow the join order');
  }
  const minNodes = checkInt('minNodes', o.minNodes ?? o.maxNodes ?? o.nnodes ?? 1, 1);
  const maxNodes = checkInt('maxNodes', o.maxNodes ?? minNodes, minNodes);
  const nnodes = elastic ? maxNodes : checkInt('nnodes', o.nnodes ?? 1, 1);
  const nodeRank = elastic ? 0 : checkInt('nodeRank', o.nodeRank ?? 0, 0, nnodes - 1);
  // Elastic launchers find each other at a fixed address, even if one node is all that comes.
  const several = nnodes > 1 || elastic;
  const masterAddr = o.masterAddr ?? DEFAULT_MASTER_ADDR;
  if (masterAddr.trim() === '') throw invalid('masterAddr must not be empty');
  const masterPort = checkInt('masterPort', o.masterPort ?? (several ? DEFAULT_MASTER_PORT : 0), 0, 65535);
  if (masterPort === 0 && several) {
    throw invalid('masterPort 0 (pick a free port) only works with a single node: other nodes could not know the port');
  }
  const script = path.resolve(cwd, o.script);
  const ext = path.extname(script);
  if (!SCRIPT_EXTENSIONS.includes(ext)) {
    throw invalid(`script must end in ${SCRIPT_EXTENSIONS.join(', ')}, got ${JSON.stringify(o.script)}`, { script: o.script });
  }
  if (!existsSync(script) || !statSync(script).isFile()) throw invalid(`script not found: ${script}`, { script });
  const runId = o.runId ?? (several ? 'none' : randomUUID());
  if (!/^[\w.-]+$/.test(runId)) throw invalid(`runId must be letters, digits, "_", "." or "-", got ${JSON.stringify(runId)}`, { runId });
  const prefix = o.prefix ?? false;
  const heartbeatIntervalMs = checkMs('heartbeatIntervalMs', o.heartbeatIntervalMs ?? 5_000, 0);
  const heartbeatTimeoutMs = checkMs('heartbeatTimeoutMs', o.heartbeatTimeoutMs ?? 3 * heartbeatIntervalMs, heartbeatIntervalMs);
  if (heartbeatIntervalMs > 0 && heartbeatTimeoutMs <= heartbeatIntervalMs) {
    throw invalid(`heartbeatTimeoutMs (${heartbeatTimeoutMs}) must be longer than heartbeatIntervalMs (${heartbeatIntervalMs})`, { option: 'heartbeatTimeoutMs', received: heartbeatTimeoutMs });
  }
  const nprocPerNode = checkInt('nprocPerNode', o.nprocPerNode, 1, 4096);
  const env = o.env ?? process.env;
  const cpuBinding = bindingOf(o, nprocPerNode, env);
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
    nprocPerNode,
    nnodes,
    nodeRank,
    elastic,
    etcd,
    leaseTtlS: Math.ceil(checkMs('leaseTtlMs', o.leaseTtlMs ?? 10_000, 1_000) / 1000),
    minNodes: elastic ? minNodes : nnodes,
    maxNodes: elastic ? maxNodes : nnodes,
    lastCallMs: checkMs('lastCallMs', o.lastCallMs ?? 30_000, 0),
    maxRestarts: checkInt('maxRestarts', o.maxRestarts ?? 0, 0, 1_000_000),
    restartScope: checkScope(o.restartScope ?? 'gang'),
    spares: checkSpares(o.spares ?? 0, o.restartScope ?? 'gang', elastic ? maxNodes : nnodes),
    masterAddr,
    masterPort,
    runId,
    joinTimeoutMs: checkMs('joinTimeoutMs', o.joinTimeoutMs ?? 600_000, 1),
    gracePeriodMs: checkMs('gracePeriodMs', o.gracePeriodMs ?? 5_000, 0),
    heartbeatIntervalMs,
    heartbeatTimeoutMs,
    healthCheck: o.healthCheck ?? false,
    ...(cpuBinding ? { cpuBinding } : {}),
    prefix,
    output: { prefix, redirects, tee, ...(o.localRanksFilter ? { consoleRanks: o.localRanksFilter } : {}), ...(runLogDir ? { runLogDir } : {}), attempt: 0 },
    exitBarrierTimeoutMs: checkMs('exitBarrierTimeoutMs', o.exitBarrierTimeoutMs ?? 300_000, 0),
    env,
    cwd,
    stdout: o.stdout ?? process.stdout,
    stderr: o.stderr ?? process.stderr,
  };
}

/** Node 0 makes the token for a one-node job; several nodes must be given the same one. */
export function resolveToken(o: Resolved): string {
  const given = o.env['NCCL_NODE_TOKEN'];
  if (given !== undefined && given !== '') return given;
  if (o.nnodes === 1 && !o.elastic) return randomBytes(32).toString('hex');
  const nodes = o.elastic ? `${o.minNodes}:${o.maxNodes}` : String(o.nnodes);
  throw invalid(
    `NCCL_NODE_TOKEN is not set: with --nnodes ${nodes} every node's launcher needs the same secret token. ` +
      'Generate one (e.g. `openssl rand -hex 32`) and export it as NCCL_NODE_TOKEN on every node.',
    { variable: 'NCCL_NODE_TOKEN' },
  );
}

