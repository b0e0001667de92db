/**
 * Which members of the previous generation are known to be gone, so a membership
 * round need not wait out its window for them (membership.ts). Only sources that do
 * not guess are used:
 *
 * - the error that broke the step: ERR_PEER_LOST from the launcher's failure record
 *   (src/comm/heartbeat.ts) names the failed RANK and its pid;
 * - the launcher's rank-restart record (src/launch/rank-restart.ts): it writes
 *   `nccl-node/rank-restart/<RANK>/<n>` once it saw life n-1 of that RANK end;
 * - the process table, for members on this machine (same boot and pid namespace): a
 *   pid that is absent or a zombie has exited.
 *
 * The launcher's ranks are RANKs (fixed for the job), a generation's ranks are not:
 * every member carries its RANK, its life (restarts) and its pid in its round record,
 * so a RANK maps to the previous generation's rank of that very process.
 *
 * A report can still be wrong (a member slow rather than dead, by a source added
 * later); the round tolerates it: the member is out of that generation and joins the
 * next one.
 */
import { readFileSync, readlinkSync } from 'node:fs';
import { NcclNodeError } from '../errors.js';
import { rankRestartKey } from '../launch/rank-restart.js';
import type { StoreClient } from '../rendezvous/client.js';
import type { Member } from './membership.js';

/** This machine and pid namespace: pids compare only between processes that share it. */
function readHostKey(): string | undefined {
  try {
    const boot = readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    return `${boot}:${readlinkSync('/proc/self/ns/pid')}`;
  } catch {
    return undefined; // not Linux: no process-table source
  }
}

export const HOST_KEY = readHostKey();

/** Whether `pid` on this machine has exited (absent, or a zombie not reaped yet). */
export function pidGone(pid: number): boolean {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return true;
  }
  // "pid (comm) S ...": the state follows the last ')' (comm may hold parentheses).
  const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  return state === 'Z' || state === 'X';
}

/** Previous ranks of `members` (this process excluded) that the error `cause` names as failed. */
export function goneByCause(members: readonly Member[], cause: unknown): number[] {
  if (!(cause instanceof NcclNodeError) || cause.code !== 'ERR_PEER_LOST') return [];
  const failed = cause.details.failedRank, pid = cause.details.pid;
  if (typeof failed !== 'number') return [];
  return members.filter((m) => m.founding === failed && (typeof pid !== 'number' || m.pid === pid)).map((m) => m.rank);
}

/** Previous ranks of `members` other than `selfId` whose process is known to have ended. */
export async function goneNow(store: StoreClient, members: readonly Member[], selfId: string, launcher: boolean): Promise<number[]> {
  const gone = await Promise.all(members.map(async (m) => {
    if (m.id === selfId) return false;
    if (HOST_KEY !== undefined && m.host === HOST_KEY && m.pid !== undefined && pidGone(m.pid)) return true;
    if (!launcher || m.founding === undefined || m.founding < 0) return false;
    return store.check(rankRestartKey(m.founding, (m.life ?? 0) + 1)).catch(() => false);
  }));
  return members.filter((_, i) => gone[i]).map((m) => m.rank);
}
