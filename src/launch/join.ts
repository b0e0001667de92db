/**
 * The gang protocol between ranks and launchers, spoken through the job's store:
 *
 * - `nccl-node/join/<rank>`: JSON {pid, host, localRank}. A rank writes it from
 *   init(); a launcher writes it (with exitedBeforeJoin) for a rank that finished
 *   with code 0 without ever joining, so that rank is not reported missing.
 * - `nccl-node/done/<rank>`: written by a launcher when its rank exited with 0;
 *   node 0's launcher waits for all of them before closing the store.
 * - `nccl-node/failed`: JSON FailureRecord, written once by the first launcher
 *   that sees a failure; every launcher watches it and stops its ranks.
 */
import os from 'node:os';
import { z } from 'zod';
import { NcclNodeError } from '../errors.js';
import type { StoreClient } from '../rendezvous/client.js';
import type { KeyView } from './keyview.js';

export const JOIN_KEY_PREFIX = 'nccl-node/join/';
export const DONE_KEY_PREFIX = 'nccl-node/done/';
export const FAILED_KEY = 'nccl-node/failed';

export const joinKey = (rank: number): string => `${JOIN_KEY_PREFIX}${rank}`;
export const doneKey = (rank: number): string => `${DONE_KEY_PREFIX}${rank}`;

export const JoinInfoSchema = z.object({
  pid: z.number().int().positive(),
  host: z.string(),
  localRank: z.number().int().nonnegative(),
  exitedBeforeJoin: z.boolean().optional(),
});
export type JoinInfo = z.infer<typeof JoinInfoSchema>;

export const FailureRecordSchema = z.object({
  /**
   * exit: non-zero code; signal: killed; join-timeout: ranks missing; interrupted: launcher got a signal;
   * store-lost; node-lost: a node's launcher vanished; rendezvous: too few nodes came; error: launcher fault;
   * heartbeat: a rank stopped heartbeating (hung or stopped; health-monitor.ts).
   */
  reason: z.enum(['exit', 'signal', 'join-timeout', 'interrupted', 'store-lost', 'node-lost', 'rendezvous', 'error', 'heartbeat']),
  /** The failing rank, when one rank is to blame. */
  rank: z.number().int().nonnegative().optional(),
  /** Ranks that did not join, for join-timeout. */
  missing: z.array(z.number().int().nonnegative()).optional(),
  pid: z.number().int().positive().optional(),
  signal: z.string().optional(),
  /** What every launcher exits with: the rank's code, or 128 + signal number. */
  exitCode: z.number().int().min(1).max(255),
  node: z.number().int().nonnegative(),
  host: z.string(),
  /** One line for people, e.g. "rank 2 (pid 4242) exited with code 3". */
  message: z.string(),
});
export type FailureRecord = z.infer<typeof FailureRecordSchema>;

export interface AnnounceInfo {
  rank: number;
  localRank: number;
  pid?: number;
  host?: string;
}

/** Tells the launcher (if any) that this rank is up. Called by init(). */
export async function announceJoin(client: StoreClient, info: AnnounceInfo): Promise<void> {
  const { rank, localRank } = info;
  if (!Number.isInteger(rank) || rank < 0) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `announceJoin: rank must be a non-negative integer, got ${rank}`);
  }
  const value: JoinInfo = JoinInfoSchema.parse({ pid: info.pid ?? process.pid, host: info.host ?? os.hostname(), localRank });
  await client.set(joinKey(rank), JSON.stringify(value));
}

/**
 * Waits until every rank in `ranks` has joined or `timeoutMs` passed; returns the
 * ranks still missing (empty when all joined). Rejects when `signal` aborts or the
 * store is lost.
 */
export async function watchJoins(view: KeyView, ranks: readonly number[], timeoutMs: number, signal?: AbortSignal): Promise<number[]> {
  try {
    await view.waitAll(ranks.map(joinKey), timeoutMs, signal);
    return [];
  } catch (err) {
    if (!(err instanceof NcclNodeError && err.code === 'ERR_TIMEOUT')) throw err;
  }
  const present = await Promise.all(ranks.map((r) => view.has(joinKey(r))));
  return ranks.filter((_, i) => !present[i]);
}

/** Publishes a failure unless one is there already (the first cause is the useful one). */
export async function publishFailure(view: KeyView, record: FailureRecord): Promise<boolean> {
  if (await view.has(FAILED_KEY)) return false;
  await view.write(FAILED_KEY, JSON.stringify(FailureRecordSchema.parse(record)));
  return true;
}

/** Reads a failure record, tolerating a value written by something else. */
export function parseFailure(text: string): FailureRecord {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    // Falls through to the generic record.
  }
  const parsed = FailureRecordSchema.safeParse(json);
  if (parsed.success) return parsed.data;
  return { reason: 'error', exitCode: 1, node: 0, host: 'unknown', message: `a failure was reported: ${text.slice(0, 200)}` };
}

/** Resolves with the first failure published by any launcher; rejects on abort or store loss. */
export async function watchFailure(view: KeyView, signal?: AbortSignal): Promise<FailureRecord> {
  await view.waitAll([FAILED_KEY], Infinity, signal);
  return parseFailure((await view.read(FAILED_KEY)) ?? '');
}
