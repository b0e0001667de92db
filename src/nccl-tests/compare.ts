/**
 * `nccl-node bench compare a.json b.json`: busbw of b over a for every row the two
 * runs share (same collective, type, op, root and size), out-of-place and in-place;
 * rows below 1 - threshold are flagged. Reads nccl-tests' own JSON files too.
 */
import { readFileSync } from 'node:fs';
import { general, getFloatStr, padLeft } from './printf.js';

interface JsonRow {
  size: number;
  type: string;
  redop: string;
  root: string;
  collective?: string;
  out_of_place?: { bus_bw: number } | null;
  in_place?: { bus_bw: number } | null;
}

interface JsonDoc {
  results?: JsonRow[];
  average_bus_bandwidth?: { bandwidth: number };
  nccl_node?: { program?: string; backend?: string };
}

const key = (r: JsonRow) => `${r.collective ?? ''}|${r.type}|${r.redop}|${String(r.root).trim()}|${r.size}`;

export interface Comparison {
  lines: string[];
  regressions: number;
}

export function compareDocs(a: JsonDoc, b: JsonDoc, thresholdPct: number): Comparison {
  const base = new Map((a.results ?? []).map((r) => [key(r), r]));
  const limit = 1 - thresholdPct / 100;
  const lines = [
    `# busbw ratio b/a per size; flagged (<<) when below ${general(limit)} (threshold ${general(thresholdPct)}%)`,
    `# ${padLeft('size', 10)}  ${padLeft('type', 8)}  ${padLeft('redop', 6)}  ${padLeft('root', 6)}  ${padLeft('oop a', 7)}  ${padLeft('oop b', 7)}  ${padLeft('ratio', 6)}  ${padLeft('ip a', 7)}  ${padLeft('ip b', 7)}  ${padLeft('ratio', 6)}`,
  ];
  let regressions = 0;
  let matched = 0;
  for (const r of b.results ?? []) {
    const o = base.get(key(r));
    if (!o) continue;
    matched++;
    const cols: string[] = [];
    let flag = false;
    for (const which of ['out_of_place', 'in_place'] as const) {
      const x = o[which]?.bus_bw;
      const y = r[which]?.bus_bw;
      const ratio = x && y !== undefined ? y / x : NaN;
      if (ratio < limit) flag = true;
      cols.push(getFloatStr(x ?? NaN, 7), getFloatStr(y ?? NaN, 7), getFloatStr(ratio, 6));
    }
    if (flag) regressions++;
    lines.push(`  ${padLeft(String(r.size), 10)}  ${padLeft(r.type, 8)}  ${padLeft(r.redop, 6)}  ${padLeft(String(r.root).trim(), 6)}  ${cols.join('  ')}${flag ? '  <<' : ''}`);
  }
  const avgA = a.average_bus_bandwidth?.bandwidth;
  const avgB = b.average_bus_bandwidth?.bandwidth;
  lines.push(`# rows compared: ${matched}, regressions: ${regressions}`);
  if (avgA !== undefined && avgB !== undefined) lines.push(`# Avg bus bandwidth: a ${general(avgA)} b ${general(avgB)} ratio ${general(avgB / avgA)}`);
  return { lines, regressions };
}

/** Prints the comparison; resolves to 0, or 1 when a row regressed (2 for unreadable input). */
export function compareFiles(files: string[], thresholdPct: number, print: (l: string) => void): number {
  if (files.length !== 2) {
    process.stderr.write('nccl-node bench compare: expected two JSON files (a.json b.json)\n');
    return 2;
  }
  let docs: JsonDoc[];
  try {
    docs = files.map((f) => JSON.parse(readFileSync(f, 'utf8')) as JsonDoc);
  } catch (err) {
    process.stderr.write(`nccl-node bench compare: ${(err as Error).message}\n`);
    return 2;
  }
  const c = compareDocs(docs[0]!, docs[1]!, thresholdPct);
  for (const l of c.lines) print(l);
  return c.regressions ? 1 : 0;
}
