/**
 * Where this process sits in the job: rank, world size, the store's address and the
 * job token. Read from whatever launched us (nccl-node run, torchrun, Slurm's srun,
 * Open MPI's mpirun) so the same script runs under any of them unchanged.
 */
import { createHash, randomBytes } from 'node:crypto';
import { z } from 'zod';
import { NcclNodeError } from '../errors.js';

export type JobEnvSource = 'options' | 'nccl-node' | 'torchrun' | 'slurm' | 'ompi' | 'single';

export interface JobEnv {
  rank: number;
  worldSize: number;
  localRank: number;
  localWorldSize: number;
  masterAddr: string;
  masterPort: number;
  /** Undefined when the job has ranks but nothing to take a shared token from. */
  token: string | undefined;
  /** True when the token was derived from a public job id: it then keeps jobs apart but is not secret. */
  tokenDerived: boolean;
  /** True when a launcher hosts the store (NCCL_NODE_STORE_HOSTED=1), so rank 0 must not. */
  storeHosted: boolean;
  /**
   * Under torchrun with TORCHELASTIC_USE_AGENT_STORE=True: MASTER_PORT is the agent's
   * TCPStore, and the job's store is found through it (agent-store.ts).
   */
  agentStore?: { runId: string; restartCount: number };
  source: JobEnvSource;
}

export type Env = Record<string, string | undefined>;

export const DEFAULT_MASTER_ADDR = '127.0.0.1';
export const DEFAULT_MASTER_PORT = 29500;

function show(value: unknown): string {
  return typeof value === 'string' ? JSON.stringify(value) : String(value);
}

function invalid(variable: string, expected: string, received: unknown): never {
  throw new NcclNodeError(
    'ERR_INVALID_ARGUMENT',
    `${variable}: expected ${expected}, got ${show(received)}`,
    { variable, expected, received },
  );
}

const DIGITS = z.string().trim().regex(/^\d+$/);

/** An integer in [min, max] from an environment string or an option number. */
function int(variable: string, raw: string | number, min: number, max: number, expected?: string): number {
  const what = expected ?? (max === Number.MAX_SAFE_INTEGER ? `an integer >= ${min}` : `an integer in [${min}, ${max}]`);
  const schema = z.number().int().min(min).max(max);
  const parsed = typeof raw === 'number' ? schema.safeParse(raw) : DIGITS.transform(Number).pipe(schema).safeParse(raw);
  if (!parsed.success) invalid(variable, what, raw);
  return parsed.data;
}

function text(variable: string, raw: string): string {
  if (!z.string().trim().min(1).safeParse(raw).success) invalid(variable, 'a non-empty string', raw);
  return raw.trim();
}

/** A value that may be missing; `name` is the variable it came from, for errors. */
interface Field<T> {
  value: T;
  name: string;
}

function envField(env: Env, name: string): Field<string> | undefined {
  const value = env[name];
  return value === undefined ? undefined : { value, name };
}

function firstEnv(env: Env, ...names: string[]): Field<string> | undefined {
  for (const name of names) {
    const f = envField(env, name);
    if (f !== undefined) return f;
  }
  return undefined;
}

function required(env: Env, name: string, because: string): Field<string> {
  const f = envField(env, name);
  if (f === undefined) invalid(name, `to be set (${because})`, undefined);
  return f;
}

/**
 * Expands Slurm's compressed per-node task counts, "2(x3),1" -> [2, 2, 2, 1].
 * Throws naming `variable` when the text is not in that form.
 */
export function parseSlurmTasksPerNode(value: string, variable = 'SLURM_TASKS_PER_NODE'): number[] {
  const out: number[] = [];
  for (const part of value.trim().split(',')) {
    const m = /^(\d+)(?:\(x(\d+)\))?$/.exec(part.trim());
    if (m === null) invalid(variable, 'counts like "4" or "2(x3),1"', value);
    const count = Number(m[1]);
    const repeat = m[2] === undefined ? 1 : Number(m[2]);
    if (count < 1 || repeat < 1 || repeat > 1_000_000) invalid(variable, 'counts like "4" or "2(x3),1"', value);
    for (let i = 0; i < repeat; i++) out.push(count);
  }
  return out;
}

/**
 * Expands Slurm's hostlist syntax: "node[01-04,07],gpu-a[1-2]" -> node01, node02,
 * node03, node04, node07, gpu-a1, gpu-a2. Ranges keep their zero padding; several
 * bracket groups in one name ("r[1-2]n[1-2]") expand to every combination, in
 * Slurm's order. Throws naming `variable` when the text is not a hostlist.
 */
export function expandSlurmHostlist(value: string, variable = 'SLURM_JOB_NODELIST'): string[] {
  const bad = (): never => invalid(variable, 'a Slurm hostlist like "node[01-04,07],gpu-a1"', value);
  // Split on the commas outside brackets.
  const names: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i <= value.length; i++) {
    const c = value[i];
    if (c === '[') depth++;
    else if (c === ']') depth--;
    if (depth < 0 || depth > 1) bad();
    if (i === value.length || (c === ',' && depth === 0)) {
      const name = value.slice(start, i).trim();
      if (name !== '') names.push(name);
      start = i + 1;
    }
  }
  if (depth !== 0 || names.length === 0) bad();
  const hosts: string[] = [];
  for (const name of names) {
    let partial = [''];
    for (const m of name.matchAll(/([^[\]]*)(?:\[([^\]]*)\])?/g)) {
      const [whole, text, ranges] = m;
      if (whole === '') continue;
      if (/[[\]]/.test(text ?? '')) bad();
      let parts = [text ?? ''];
      if (ranges !== undefined) {
        parts = [];
        for (const r of ranges.split(',')) {
          const rm = /^\s*(\d+)(?:-(\d+))?\s*$/.exec(r);
          if (rm === null) bad();
          const lo = rm![1]!;
          const hi = rm![2] ?? lo;
          if (Number(hi) < Number(lo) || Number(hi) - Number(lo) > 100_000) bad();
          for (let n = Number(lo); n <= Number(hi); n++) parts.push(`${text}${String(n).padStart(lo.length, '0')}`);
        }
      }
      partial = partial.flatMap((p) => parts.map((q) => p + q));
    }
    hosts.push(...partial);
  }
  return hosts;
}

/** A token that every rank of one job computes alike from the job's id. */
export function deriveToken(source: JobEnvSource, jobId: string): string {
  return createHash('sha256').update(`nccl-node job token\0${source}\0${jobId}`).digest('hex');
}

/** What a launcher's variables say, before options and defaults. */
interface Detected {
  source: JobEnvSource;
  rank?: Field<string>;
  worldSize?: Field<string>;
  localRank?: Field<string>;
  localWorldSize?: Field<string | number>;
  masterAddr?: Field<string>;
  /** The job id a token may be derived from. */
  jobId?: string;
}

function detectSlurm(env: Env): Detected {
  // Tasks per node on this node: Slurm's list is per node, indexed by SLURM_NODEID.
  // SLURM_NTASKS_PER_NODE is only a request (and may disagree), so it is the fallback.
  let localWorldSize: Field<number | string> | undefined;
  const list = firstEnv(env, 'SLURM_STEP_TASKS_PER_NODE', 'SLURM_TASKS_PER_NODE');
  if (list !== undefined) {
    const counts = parseSlurmTasksPerNode(list.value, list.name);
    const distinct = new Set(counts);
    const nodeId = envField(env, 'SLURM_NODEID');
    if (nodeId !== undefined) {
      const i = int(nodeId.name, nodeId.value, 0, counts.length - 1, `a node index below ${counts.length} (from ${list.name}=${list.value})`);
      localWorldSize = { value: counts[i] as number, name: list.name };
    } else if (distinct.size === 1) {
      localWorldSize = { value: counts[0] as number, name: list.name };
    } else {
      invalid('SLURM_NODEID', `to be set (${list.name}=${list.value} differs between nodes)`, undefined);
    }
  } else {
    localWorldSize = envField(env, 'SLURM_NTASKS_PER_NODE');
  }
  const jobId = env['SLURM_JOB_ID'] ?? env['SLURM_JOBID'];
  const stepId = env['SLURM_STEP_ID'] ?? env['SLURM_STEPID'];
  // Rank 0 runs on the first node of the step (SLURM_LAUNCH_NODE_IPADDR is where srun
  // was typed, often a login node that runs no rank at all).
  let masterAddr = envField(env, 'MASTER_ADDR');
  const nodelist = firstEnv(env, 'SLURM_STEP_NODELIST', 'SLURM_JOB_NODELIST', 'SLURM_NODELIST');
  if (masterAddr === undefined && nodelist !== undefined) {
    masterAddr = { value: expandSlurmHostlist(nodelist.value, nodelist.name)[0]!, name: nodelist.name };
  }
  return {
    source: 'slurm',
    rank: envField(env, 'SLURM_PROCID'),
    worldSize: envField(env, 'SLURM_NTASKS'),
    localRank: envField(env, 'SLURM_LOCALID'),
    localWorldSize,
    masterAddr,
    jobId: jobId === undefined ? undefined : `${jobId}.${stepId ?? ''}`,
  };
}

function detect(env: Env): Detected {
  if (env['NCCL_NODE_LAUNCHER'] === '1' || env['RANK'] !== undefined || env['WORLD_SIZE'] !== undefined) {
    const source = env['NCCL_NODE_LAUNCHER'] === '1' ? 'nccl-node' : 'torchrun';
    const because = source === 'nccl-node' ? 'NCCL_NODE_LAUNCHER=1 is set' : 'torchrun-style variables are set';
    return {
      source,
      rank: required(env, 'RANK', because),
      worldSize: required(env, 'WORLD_SIZE', because),
      localRank: envField(env, 'LOCAL_RANK'),
      localWorldSize: envField(env, 'LOCAL_WORLD_SIZE'),
      masterAddr: envField(env, 'MASTER_ADDR'),
      jobId: source === 'torchrun' ? env['TORCHELASTIC_RUN_ID'] : undefined,
    };
  }
  // Only inside a job step (srun sets SLURM_STEP_ID): an sbatch script itself also
  // sees SLURM_PROCID=0 and SLURM_NTASKS=N but is one process, not N ranks.
  if (env['SLURM_PROCID'] !== undefined && env['SLURM_NTASKS'] !== undefined
    && (env['SLURM_STEP_ID'] ?? env['SLURM_STEPID']) !== undefined) {
    return detectSlurm(env);
  }
  if (env['OMPI_COMM_WORLD_RANK'] !== undefined || env['OMPI_COMM_WORLD_SIZE'] !== undefined) {
    const because = 'Open MPI variables are set';
    return {
      source: 'ompi',
      rank: required(env, 'OMPI_COMM_WORLD_RANK', because),
      worldSize: required(env, 'OMPI_COMM_WORLD_SIZE', because),
      localRank: envField(env, 'OMPI_COMM_WORLD_LOCAL_RANK'),
      localWorldSize: envField(env, 'OMPI_COMM_WORLD_LOCAL_SIZE'),
      masterAddr: envField(env, 'MASTER_ADDR'),
      jobId: env['PMIX_NAMESPACE'] ?? env['OMPI_MCA_orte_hnp_uri'],
    };
  }
  return { source: 'single', masterAddr: envField(env, 'MASTER_ADDR') };
}

function flag(env: Env, name: string): boolean {
  const v = env[name];
  if (v === undefined || v === '' || v === '0') return false;
  if (v === '1') return true;
  return invalid(name, '"1" or "0"', v);
}

/**
 * Resolves this process's place in the job. Precedence: `overrides` (init options),
 * then nccl-node run / torchrun variables, Slurm (inside srun), Open MPI, and
 * finally a single process (rank 0 of 1). Throws NcclNodeError('ERR_INVALID_ARGUMENT')
 * naming the variable when a value is malformed or inconsistent.
 */
export function resolveJobEnv(env: Env = process.env, overrides: Partial<JobEnv> = {}): JobEnv {
  const d = detect(env);
  const o = overrides;
  const fromOptions = o.rank !== undefined || o.worldSize !== undefined;
  const source: JobEnvSource = fromOptions ? 'options' : d.source;
  const jobInEnv = d.source !== 'single';

  const worldSize = o.worldSize !== undefined ? int('options.worldSize', o.worldSize, 1, Number.MAX_SAFE_INTEGER)
    : d.worldSize !== undefined ? int(d.worldSize.name, d.worldSize.value, 1, Number.MAX_SAFE_INTEGER) : 1;
  const worldName = o.worldSize !== undefined ? 'options.worldSize' : d.worldSize?.name ?? 'the world size';
  const rankExpected = `an integer in [0, ${worldSize - 1}] (${worldName} is ${worldSize})`;
  const rank = o.rank !== undefined ? int('options.rank', o.rank, 0, worldSize - 1, rankExpected)
    : d.rank !== undefined ? int(d.rank.name, d.rank.value, 0, worldSize - 1, rankExpected) : 0;

  // Without local information the ranks are taken to share one node.
  const useEnvLocal = !fromOptions || jobInEnv;
  const lwsField = useEnvLocal ? d.localWorldSize : undefined;
  const localWorldSize = o.localWorldSize !== undefined
    ? int('options.localWorldSize', o.localWorldSize, 1, worldSize, `an integer in [1, ${worldSize}] (world size ${worldSize})`)
    : lwsField !== undefined
      ? int(lwsField.name, lwsField.value, 1, worldSize, `an integer in [1, ${worldSize}] (world size ${worldSize})`)
      : worldSize;
  const lrField = useEnvLocal ? d.localRank : undefined;
  const lrExpected = `an integer in [0, ${localWorldSize - 1}] (local world size ${localWorldSize})`;
  const localRank = o.localRank !== undefined ? int('options.localRank', o.localRank, 0, localWorldSize - 1, lrExpected)
    : lrField !== undefined ? int(lrField.name, lrField.value, 0, localWorldSize - 1, lrExpected)
      : rank % localWorldSize;

  const masterAddr = o.masterAddr !== undefined ? text('options.masterAddr', o.masterAddr)
    : d.masterAddr !== undefined ? text(d.masterAddr.name, d.masterAddr.value) : DEFAULT_MASTER_ADDR;
  const masterPort = o.masterPort !== undefined ? int('options.masterPort', o.masterPort, 1, 65535, 'a TCP port in [1, 65535]')
    : env['MASTER_PORT'] !== undefined ? int('MASTER_PORT', env['MASTER_PORT'], 1, 65535, 'a TCP port in [1, 65535]')
      : DEFAULT_MASTER_PORT;

  let token: string | undefined;
  let tokenDerived = false;
  if (o.token !== undefined) {
    token = text('options.token', o.token);
  } else if (env['NCCL_NODE_TOKEN'] !== undefined) {
    token = text('NCCL_NODE_TOKEN', env['NCCL_NODE_TOKEN']);
  } else if (d.jobId !== undefined && d.jobId !== '') {
    token = deriveToken(d.source, d.jobId);
    tokenDerived = true;
  } else if (worldSize === 1) {
    // Alone, nobody has to agree with us: a fresh secret is right.
    token = randomBytes(32).toString('hex');
  }

  // torch tests str(True), exactly.
  const useAgentStore = source === 'torchrun' && env['TORCHELASTIC_USE_AGENT_STORE'] === 'True'
    && o.masterAddr === undefined && o.masterPort === undefined;
  const agentStore = useAgentStore
    ? {
      runId: env['TORCHELASTIC_RUN_ID'] !== undefined ? text('TORCHELASTIC_RUN_ID', env['TORCHELASTIC_RUN_ID']) : 'none',
      restartCount: env['TORCHELASTIC_RESTART_COUNT'] !== undefined
        ? int('TORCHELASTIC_RESTART_COUNT', env['TORCHELASTIC_RESTART_COUNT'], 0, Number.MAX_SAFE_INTEGER) : 0,
    }
    : undefined;

  return {
    rank,
    worldSize,
    localRank,
    localWorldSize,
    masterAddr,
    masterPort,
    token,
    tokenDerived,
    storeHosted: o.storeHosted ?? flag(env, 'NCCL_NODE_STORE_HOSTED'),
    ...(agentStore ? { agentStore } : {}),
    source,
  };
}
