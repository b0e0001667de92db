/**
 * What a rank process is started with: node's arguments (the orphan guard's preload,
 * and tsx where TypeScript must run) and its environment, torchrun's variables plus
 * the launcher's own.
 */
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { JOB_ID_ENV } from '../checkpoint/in-memory-files.js';
import { HEARTBEAT_INTERVAL_ENV } from '../comm/heartbeat.js';
import type { Resolved } from './options.js';

const TS_EXTENSIONS = new Set(['.ts', '.mts', '.cts']);
/** Set to 1 for a rank the launcher restarted alone (--restart-scope rank): it rejoins a running group (ElasticGroup.start). */
export const REJOIN_ENV = 'NCCL_NODE_FT_REJOIN';
/** How many times the launcher restarted this rank alone (0 on its first life). */
export const RANK_RESTART_COUNT_ENV = 'NCCL_NODE_RANK_RESTART_COUNT';

/** The fd on which each rank sees its end of the orphan-guard socket pair. */
export const GUARD_FD = 3;

/** `node` arguments that load the orphan guard, and tsx where TypeScript must run. */
export function nodeArgs(script: string): string[] {
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

export interface RankPlace {
  rank: number;
  localRank: number;
  worldSize: number;
  nodeRank: number;
  nnodes: number;
  attempt: number;
  storeHost: string;
  storePort: number;
  token: string;
  /** Restarts of this rank alone so far (--restart-scope rank). */
  restarts?: number;
  /** The same in every attempt of the job (node-local snapshot files are keyed by it). */
  jobId?: string;
}

/** The rank's environment: the launcher's own on top of torchrun's set (one role, "default", as torchrun without --role). */
export function rankEnv(o: Resolved, p: RankPlace): NodeJS.ProcessEnv {
  return {
    ...o.env,
    RANK: String(p.rank),
    WORLD_SIZE: String(p.worldSize),
    LOCAL_RANK: String(p.localRank),
    LOCAL_WORLD_SIZE: String(o.nprocPerNode),
    GROUP_RANK: String(p.nodeRank),
    GROUP_WORLD_SIZE: String(p.nnodes),
    ROLE_NAME: 'default',
    ROLE_RANK: String(p.rank),
    ROLE_WORLD_SIZE: String(p.worldSize),
    TORCHELASTIC_RUN_ID: o.runId,
    TORCHELASTIC_RESTART_COUNT: String(p.attempt),
    TORCHELASTIC_MAX_RESTARTS: String(o.maxRestarts),
    MASTER_ADDR: p.storeHost,
    MASTER_PORT: String(p.storePort),
    NCCL_NODE_TOKEN: p.token,
    ...(p.jobId !== undefined ? { [JOB_ID_ENV]: p.jobId } : {}),
    NCCL_NODE_STORE_HOSTED: '1',
    NCCL_NODE_LAUNCHER: '1',
    NCCL_NODE_LAUNCHER_FD: String(GUARD_FD),
    NCCL_NODE_GRACE_MS: String(o.gracePeriodMs),
    [HEARTBEAT_INTERVAL_ENV]: String(o.heartbeatIntervalMs),
    [RANK_RESTART_COUNT_ENV]: String(p.restarts ?? 0),
    // undefined drops one inherited from the launcher's own environment.
    [REJOIN_ENV]: (p.restarts ?? 0) > 0 ? '1' : undefined,
  };
}
