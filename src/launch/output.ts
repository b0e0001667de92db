/**
 * Where each rank's stdout and stderr go, with torchrun's options: --redirects (to the
 * rank's log files only), --tee (to the files and the console), --local-ranks-filter
 * (whose output reaches the console) and the "[rank] " prefix (off unless asked for).
 * Files: <log-dir>/<run-id>_<random>/attempt_<n>/<local rank>/{stdout,stderr}.log, as torchrun;
 * a rank restarted alone (--restart-scope rank) writes its k-th new life's under
 * <local rank>/restart_<k>/, so the log of the life that failed is kept.
 */
import { createWriteStream, mkdirSync } from 'node:fs';
import path from 'node:path';
import type { Readable, Writable } from 'node:stream';

import { NcclNodeError } from '../errors.js';
import { pipePrefixed } from './prefix.js';

/** torchrun's numbering: 0 none, 1 stdout, 2 stderr, 3 both. */
export type StdMask = 0 | 1 | 2 | 3;
export const STDOUT = 1;
export const STDERR = 2;

/**
 * Parses a --redirects/--tee value: one mask for every rank ("3") or per local rank
 * ("0:1,1:2", ranks not named get 0).
 */
export function parseStdMask(value: string, flag: string): (localRank: number) => StdMask {
  const bad = (): never => {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${flag}: expected 0, 1, 2 or 3, or local-rank:value pairs like "0:1,1:2", got ${JSON.stringify(value)}`, { option: flag, received: value });
  };
  const text = value.trim();
  if (/^[0-3]$/.test(text)) {
    const m = Number(text) as StdMask;
    return () => m;
  }
  const map = new Map<number, StdMask>();
  for (const part of text.split(',')) {
    const m = /^\s*(\d+)\s*:\s*([0-3])\s*$/.exec(part);
    if (m === null) bad();
    map.set(Number(m![1]), Number(m![2]) as StdMask);
  }
  if (map.size === 0) bad();
  return (localRank) => map.get(localRank) ?? 0;
}

/** Parses --local-ranks-filter "0,2": the local ranks whose output reaches the console. */
export function parseRanksFilter(value: string): Set<number> {
  const ranks = value.split(',').map((s) => s.trim());
  if (ranks.length === 0 || ranks.some((r) => !/^\d+$/.test(r))) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `--local-ranks-filter: expected local ranks like "0,2", got ${JSON.stringify(value)}`, { option: '--local-ranks-filter', received: value });
  }
  return new Set(ranks.map(Number));
}

export interface OutputPolicy {
  prefix: boolean;
  redirects: (localRank: number) => StdMask;
  tee: (localRank: number) => StdMask;
  /** undefined: every rank. */
  consoleRanks?: Set<number>;
  /** <log-dir>/<run-id>_<random>; files are only written when set. */
  runLogDir?: string;
  attempt: number;
  /** Restarts of this rank alone (--restart-scope rank); 0 or absent on its first life. */
  restart?: number;
}

type Stdio = 'inherit' | 'pipe' | 'ignore';

interface StreamPlan {
  console: boolean;
  file: string | undefined;
}

function plan(p: OutputPolicy, localRank: number, bit: number, name: string): StreamPlan {
  const redirected = (p.redirects(localRank) & bit) !== 0;
  const teed = (p.tee(localRank) & bit) !== 0;
  const file = p.runLogDir !== undefined && (redirected || teed)
    ? path.join(p.runLogDir, `attempt_${p.attempt}`, String(localRank), ...((p.restart ?? 0) > 0 ? [`restart_${p.restart}`] : []), `${name}.log`)
    : undefined;
  const console = !redirected && (p.consoleRanks === undefined || p.consoleRanks.has(localRank));
  return { console, file };
}

function stdioOf(s: StreamPlan, prefix: boolean): Stdio {
  if (s.file === undefined && !s.console) return 'ignore';
  return s.file === undefined && !prefix ? 'inherit' : 'pipe';
}

/** The spawn stdio for one rank's stdout and stderr, and how to wire them up once spawned. */
export function rankOutput(p: OutputPolicy, rank: number | string, localRank: number): {
  stdio: [Stdio, Stdio];
  connect: (stdout: Readable | null, stderr: Readable | null, out: Writable, err: Writable) => Promise<void>;
} {
  const plans = [plan(p, localRank, STDOUT, 'stdout'), plan(p, localRank, STDERR, 'stderr')] as const;
  const stdio: [Stdio, Stdio] = [stdioOf(plans[0], p.prefix), stdioOf(plans[1], p.prefix)];
  const connect = (stdout: Readable | null, stderr: Readable | null, out: Writable, err: Writable): Promise<void> => {
    const done: Array<Promise<void>> = [];
    for (const [i, src] of [stdout, stderr].entries()) {
      const s = plans[i]!;
      if (src === null || stdio[i] !== 'pipe') continue;
      if (s.file !== undefined) {
        mkdirSync(path.dirname(s.file), { recursive: true });
        const file = createWriteStream(s.file);
        file.on('error', () => {});
        src.pipe(file);
        done.push(new Promise((resolve) => file.on('close', resolve)));
      }
      if (s.console) done.push(pipePrefixed(src, i === 0 ? out : err, p.prefix ? `[${rank}] ` : ''));
      else if (s.file === undefined) src.resume();
    }
    return Promise.all(done).then(() => {});
  };
  return { stdio, connect };
}
