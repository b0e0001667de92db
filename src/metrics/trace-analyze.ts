/**
 * `nccl-node trace analyze DIR`: merges every rank's flight record (the JS recorder's
 * nccl-node-trace-rank*.json, src/comm/flight-record.ts, and the native NCCL
 * recorder's nccl-node-fr-rank*.json, same layout) and finds, per communicator, the
 * first collective sequence number where the ranks part ways:
 *
 * - missing: some ranks called it, others never did: those are the stalled ranks;
 * - mismatch: ranks called different collectives (or another size, dtype or root) at
 *   the same number: the ranks outside the largest agreeing group are named;
 * - incomplete: every rank called the same thing, but it did not end alike everywhere
 *   (completed on some ranks, not on others), or it never ended (timeout, still running).
 * A call that failed on every rank alike (a call every rank refused) is agreement.
 *
 * For each named rank it reports what that rank was last doing: its newest record
 * entry, that entry's state, and how long before its dump that entry ended.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import { NcclNodeError } from '../errors.js';
import type { CommTrace, TraceEntry, TraceFile } from '../comm/flight-record.js';

const entrySchema = z.object({
  id: z.number(), seq: z.number(), op: z.string(), count: z.number(), dtype: z.string(), peer: z.number(),
  state: z.string(), enqueuedUs: z.number(), startedUs: z.number(), endedUs: z.number(),
});
const fileSchema = z.object({
  version: z.literal(1),
  pid: z.number(),
  reason: z.string(),
  dumpedUs: z.number(),
  source: z.string().optional(),
  communicators: z.array(z.object({
    comm: z.string(), rank: z.number().int().min(0), size: z.number().int().min(1),
    lastEnqueuedSeq: z.number(), lastStartedSeq: z.number(), lastCompletedSeq: z.number(),
    entries: z.array(entrySchema),
  })),
});

/** One rank's call at the divergent sequence number. */
export interface RankCall {
  rank: number;
  op: string;
  count: number;
  dtype: string;
  peer: number;
  state: string;
}

/** What a named rank was last doing when it dumped its record. */
export interface LastActivity {
  rank: number;
  /** Its newest entry on this communicator, or null when it recorded none. */
  last: (TraceEntry & { idleMs: number | null }) | null;
  /** Its newest completed collective's sequence number (-1: none). */
  lastCompletedSeq: number;
}

export interface Divergence {
  seq: number;
  kind: 'missing' | 'mismatch' | 'incomplete';
  /** The calls of the ranks that made one at this number. */
  calls: RankCall[];
  /** The ranks that never arrived (missing), called something else (mismatch) or did not finish (incomplete). */
  stalled: number[];
  lastActivity: LastActivity[];
}

export interface CommAnalysis {
  comm: string;
  size: number;
  /** Ranks whose record holds this communicator. */
  ranks: number[];
  /** Ranks of the communicator with no record at all. */
  absent: number[];
  divergence: Divergence | null;
  /** The highest sequence number up to which every rank made the same calls with the same outcome (-1: none). */
  agreedThrough: number;
}

export interface TraceAnalysis {
  files: string[];
  comms: CommAnalysis[];
}

interface RankTrace {
  trace: CommTrace;
  dumpedUs: number;
}

/** Reads every flight record in `dir` (the newest dump per rank and pid, where a rank left several). */
export function readTraces(dir: string): { files: string[]; traces: { file: string; data: TraceFile }[] } {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch (err) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `trace analyze: expected a directory of flight records, cannot read ${dir} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  const files = names.filter((n) => /^nccl-node-(trace|fr)-rank\d+-\d+\.json$/.test(n)).sort();
  if (files.length === 0) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `trace analyze: expected nccl-node-trace-rank<R>-<pid>.json or nccl-node-fr-rank<R>-<pid>.json files in ${dir}, found none`);
  }
  const traces = files.map((f) => {
    const path = join(dir, f);
    let raw: unknown;
    try {
      raw = JSON.parse(readFileSync(path, 'utf8'));
    } catch (err) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `trace analyze: ${path} is not JSON (${(err as Error).message})`);
    }
    const parsed = fileSchema.safeParse(raw);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `trace analyze: ${path} is not a flight record: ${issue.path.join('.') || '(top level)'}: ${issue.message}`);
    }
    return { file: path, data: parsed.data as TraceFile };
  });
  return { files: files.map((f) => join(dir, f)), traces };
}

// send/recv take no collective number: -1 in the JS record, 0 in the native one.
const isCollective = (e: TraceEntry): boolean => e.seq >= 0 && e.op !== 'send' && e.op !== 'recv';
const signature = (e: TraceEntry): string => `${e.op}|${e.count}|${e.dtype}|${e.peer}`;

/** Analyses parsed records (what readTraces returns, or records built in memory). */
export function analyzeTraces(traces: { data: TraceFile }[]): CommAnalysis[] {
  // comm name -> rank -> its record; a later dump of the same rank replaces an earlier one.
  const byComm = new Map<string, Map<number, RankTrace>>();
  for (const { data } of traces) {
    for (const c of data.communicators) {
      let ranks = byComm.get(c.comm);
      if (!ranks) byComm.set(c.comm, (ranks = new Map()));
      const had = ranks.get(c.rank);
      if (!had || had.dumpedUs <= data.dumpedUs) ranks.set(c.rank, { trace: c, dumpedUs: data.dumpedUs });
    }
  }
  return [...byComm].sort(([a], [b]) => (a === 'world' ? -1 : b === 'world' ? 1 : a.localeCompare(b))).map(([comm, ranks]) => analyzeComm(comm, ranks));
}

function analyzeComm(comm: string, ranks: Map<number, RankTrace>): CommAnalysis {
  const size = Math.max(...[...ranks.values()].map((r) => r.trace.size));
  const present = [...ranks.keys()].sort((a, b) => a - b);
  const absent = Array.from({ length: size }, (_, r) => r).filter((r) => !ranks.has(r));
  const bySeq = new Map<number, Map<number, TraceEntry>>();
  for (const [rank, { trace }] of ranks) {
    const m = new Map<number, TraceEntry>();
    for (const e of trace.entries) if (isCollective(e)) m.set(e.seq, e);
    bySeq.set(rank, m);
  }
  // Rings forget old entries: compare only from the first number every rank still holds.
  const firsts = present.map((r) => Math.min(Infinity, ...bySeq.get(r)!.keys()));
  const lasts = present.map((r) => Math.max(-1, ...bySeq.get(r)!.keys()));
  const from = Math.max(0, ...firsts.filter(Number.isFinite));
  const to = Math.max(-1, ...lasts);
  let agreedThrough = from - 1;
  let divergence: Divergence | null = null;
  for (let seq = from; seq <= to && !divergence; seq++) {
    const calls: RankCall[] = [];
    const missing: number[] = [];
    for (const r of present) {
      const e = bySeq.get(r)!.get(seq);
      if (e) calls.push({ rank: r, op: e.op, count: e.count, dtype: e.dtype, peer: e.peer, state: e.state });
      else missing.push(r);
    }
    const groups = new Map<string, number[]>();
    for (const r of present) {
      const e = bySeq.get(r)!.get(seq);
      if (!e) continue;
      const k = signature(e);
      groups.set(k, [...(groups.get(k) ?? []), r]);
    }
    if (missing.length) divergence = { seq, kind: 'missing', calls, stalled: missing, lastActivity: [] };
    else if (groups.size > 1) {
      // The largest group (ties: the one holding the lowest rank) is taken as the intended call.
      const ordered = [...groups.values()].sort((a, b) => b.length - a.length || a[0]! - b[0]!);
      divergence = { seq, kind: 'mismatch', calls, stalled: ordered.slice(1).flat().sort((a, b) => a - b), lastActivity: [] };
    } else if (new Set(calls.map((c) => c.state)).size > 1 || (calls[0]!.state !== 'completed' && calls[0]!.state !== 'failed')) {
      const notDone = calls.filter((c) => c.state !== 'completed').map((c) => c.rank);
      // Ranks still running it while others gave up (timeout) are the slow side; otherwise every rank that did not finish.
      const running = notDone.filter((r) => calls.find((c) => c.rank === r)!.state === 'started' || calls.find((c) => c.rank === r)!.state === 'scheduled');
      divergence = { seq, kind: 'incomplete', calls, stalled: running.length && running.length < notDone.length ? running : notDone, lastActivity: [] };
    } else agreedThrough = seq;
  }
  if (divergence) {
    divergence.lastActivity = divergence.stalled.map((rank) => {
      const { trace, dumpedUs } = ranks.get(rank)!;
      const e = trace.entries.at(-1);
      const ended = e && e.endedUs > 0 ? e.endedUs : 0;
      return {
        rank,
        last: e ? { ...e, idleMs: ended ? (dumpedUs - ended) / 1000 : null } : null,
        lastCompletedSeq: Math.max(-1, ...trace.entries.filter((x) => isCollective(x) && x.state === 'completed').map((x) => x.seq)),
      };
    });
  }
  return { comm, size, ranks: present, absent, divergence, agreedThrough };
}

/** Reads and analyses a directory of flight records. */
export function analyzeTraceDir(dir: string): TraceAnalysis {
  const { files, traces } = readTraces(dir);
  return { files, comms: analyzeTraces(traces) };
}

const list = (rs: number[]): string => `${rs.length > 1 ? 'ranks' : 'rank'} ${rs.join(', ')}`;
const callText = (c: { op: string; count: number; dtype: string; peer: number }, seq: number): string =>
  `${c.op} #${seq}${c.op === 'barrier' || c.op === 'split' ? '' : ` (${c.count} x ${c.dtype}${c.peer >= 0 ? `, root ${c.peer}` : ''})`}`;

/** The analysis as lines of text, one block per communicator. */
export function formatTraceAnalysis(a: TraceAnalysis): string {
  const out: string[] = [`${a.files.length} flight record file(s)`];
  for (const c of a.comms) {
    out.push(`communicator ${c.comm} (${c.size} ranks; records from ${list(c.ranks)}${c.absent.length ? `; none from ${list(c.absent)}` : ''})`);
    const d = c.divergence;
    if (!d) {
      out.push(`  no divergence: every rank made the same calls with the same outcome through #${c.agreedThrough}`);
      continue;
    }
    out.push(`  ranks diverge at #${d.seq} (${d.kind}); all agreed through #${c.agreedThrough}`);
    const groups = new Map<string, RankCall[]>();
    for (const call of d.calls) {
      const k = `${callText(call, d.seq)}: ${call.state}`;
      groups.set(k, [...(groups.get(k) ?? []), call]);
    }
    for (const [k, calls] of groups) out.push(`  ${list(calls.map((x) => x.rank))} called ${k}`);
    const verb = d.kind === 'missing' ? 'never called it' : d.kind === 'mismatch' ? 'called another collective' : 'did not complete it';
    out.push(`  stalled: ${list(d.stalled)} (${verb})`);
    for (const l of d.lastActivity) {
      if (!l.last) {
        out.push(`  rank ${l.rank} last: nothing recorded`);
        continue;
      }
      const e = l.last;
      const idle = e.idleMs === null ? 'still running at its dump' : `ended ${(e.idleMs / 1000).toFixed(2)} s before its dump`;
      out.push(`  rank ${l.rank} last: ${isCollective(e) ? callText(e, e.seq) : `${e.op} (peer ${e.peer})`} ${e.state}, ${idle}; last completed #${l.lastCompletedSeq}`);
    }
  }
  return out.join('\n');
}
