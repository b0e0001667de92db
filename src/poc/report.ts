/**
 * The POC's report: report.json (every metric, gate and verdict, the environment and
 * versions), report.md (the gate table and the numbers) and a self-contained
 * report.html whose plots are Vega-Lite charts rendered to SVG here, in Node (vega's
 * headless renderer), so the page needs no script and no network to open.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { arch, cpus, hostname, platform, release, totalmem } from 'node:os';
import { join } from 'node:path';
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';

export type Verdict = 'pass' | 'fail' | 'skipped';

export interface Gate {
  /** The stage the gate belongs to (connectivity, pretrain, checkpoint, ...). */
  stage: string;
  name: string;
  /** What was measured, and the bound it had to meet, in the same unit. */
  measured: number | null;
  threshold: number;
  /** 'min': measured >= threshold passes; 'max': measured <= threshold passes. */
  kind: 'min' | 'max';
  unit: string;
  verdict: Verdict;
  note?: string;
}

/** A gate's verdict from its measurement (null: the stage did not run). */
export function gate(g: Omit<Gate, 'verdict'>): Gate {
  const verdict: Verdict = g.measured === null ? 'skipped' : (g.kind === 'min' ? g.measured >= g.threshold : g.measured <= g.threshold) ? 'pass' : 'fail';
  return { ...g, verdict };
}

/** A plot: a Vega-Lite spec without data, and the rows to draw. */
export interface Plot {
  id: string;
  title: string;
  /** A Vega-Lite view spec (mark, encoding, ...) without its data. */
  spec: Record<string, unknown>;
  rows: Record<string, unknown>[];
}

export interface Report {
  title: string;
  startedAt: string;
  finishedAt: string;
  gates: Gate[];
  metrics: Record<string, unknown>;
  plots: Plot[];
}

export interface WrittenReport {
  verdict: Verdict;
  files: { json: string; md: string; html: string };
}

/** The whole run passes only if no gate failed (skipped gates are listed, not passed). */
export function overall(gates: readonly Gate[]): Verdict {
  if (gates.some((g) => g.verdict === 'fail')) return 'fail';
  return gates.every((g) => g.verdict === 'skipped') ? 'skipped' : 'pass';
}

export function environment(): Record<string, unknown> {
  const c = cpus();
  return {
    node: process.version, platform: platform(), arch: arch(), kernel: release(), host: hostname(),
    cpus: c.length, cpuModel: c[0]?.model ?? null, memoryBytes: totalmem(),
  };
}

/** One chart as standalone SVG. */
export async function renderSvg(plot: Plot): Promise<string> {
  const spec = compile({ ...plot.spec, data: { values: plot.rows } } as unknown as TopLevelSpec).spec;
  const view = new vega.View(vega.parse(spec), { renderer: 'none' });
  const svg = await view.toSVG();
  view.finalize();
  return svg;
}

function esc(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function fmt(v: number | null): string {
  if (v === null) return '-';
  return Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-2 && v !== 0) ? v.toExponential(3) : String(Number(v.toPrecision(4)));
}

function markdown(r: Report, verdict: Verdict, env: Record<string, unknown>): string {
  const rows = r.gates.map((g) => `| ${g.stage} | ${g.name} | ${fmt(g.measured)} | ${g.kind === 'min' ? '>=' : '<='} ${fmt(g.threshold)} | ${g.unit} | ${g.verdict.toUpperCase()} | ${g.note ?? ''} |`);
  return [
    `# ${r.title}`, '', `Verdict: **${verdict.toUpperCase()}** (${r.startedAt} to ${r.finishedAt})`, '',
    '| stage | gate | measured | bound | unit | verdict | note |', '|---|---|---|---|---|---|---|', ...rows, '',
    '## Environment', '', ...Object.entries(env).map(([k, v]) => `- ${k}: ${String(v)}`), '',
    '## Metrics', '', '```json', JSON.stringify(r.metrics, null, 2), '```', '',
  ].join('\n');
}

function html(r: Report, verdict: Verdict, svgs: { plot: Plot; svg: string }[], env: Record<string, unknown>): string {
  const gateRows = r.gates.map((g) => `<tr class="${g.verdict}"><td>${esc(g.stage)}</td><td>${esc(g.name)}</td><td>${fmt(g.measured)}</td>` +
    `<td>${g.kind === 'min' ? '&ge;' : '&le;'} ${fmt(g.threshold)}</td><td>${esc(g.unit)}</td><td>${g.verdict.toUpperCase()}</td><td>${esc(g.note ?? '')}</td></tr>`).join('\n');
  const figures = svgs.map(({ plot, svg }) => `<figure id="${esc(plot.id)}"><figcaption>${esc(plot.title)}</figcaption>${svg}</figure>`).join('\n');
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${esc(r.title)}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; } td, th { border: 1px solid #ccc; padding: 4px 8px; text-align: left; }
tr.pass td:nth-child(6) { color: #0a0; font-weight: bold; } tr.fail td:nth-child(6) { color: #c00; font-weight: bold; }
tr.skipped td:nth-child(6) { color: #888; } .verdict-pass { color: #0a0; } .verdict-fail { color: #c00; }
figure { display: inline-block; margin: 1em; vertical-align: top; } figcaption { font-weight: bold; }
</style></head>
<body>
<h1>${esc(r.title)}</h1>
<p>Verdict: <strong class="verdict-${verdict}">${verdict.toUpperCase()}</strong> (${esc(r.startedAt)} to ${esc(r.finishedAt)})</p>
<h2>Gates</h2>
<table><thead><tr><th>stage</th><th>gate</th><th>measured</th><th>bound</th><th>unit</th><th>verdict</th><th>note</th></tr></thead>
<tbody>
${gateRows}
</tbody></table>
<h2>Plots</h2>
${figures}
<h2>Environment</h2>
<ul>${Object.entries(env).map(([k, v]) => `<li>${esc(k)}: ${esc(String(v))}</li>`).join('')}</ul>
</body></html>
`;
}

/** Writes report.json, report.md and report.html into `dir`. */
export async function writeReport(dir: string, r: Report): Promise<WrittenReport> {
  await mkdir(dir, { recursive: true });
  const verdict = overall(r.gates);
  const env = environment();
  const svgs = await Promise.all(r.plots.map(async (plot) => ({ plot, svg: await renderSvg(plot) })));
  const files = { json: join(dir, 'report.json'), md: join(dir, 'report.md'), html: join(dir, 'report.html') };
  await writeFile(files.json, `${JSON.stringify({ ...r, verdict, environment: env }, null, 2)}\n`);
  await writeFile(files.md, markdown(r, verdict, env));
  await writeFile(files.html, html(r, verdict, svgs, env));
  return { verdict, files };
}
