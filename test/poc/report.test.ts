// The POC report: gates decide the verdict, report.json and report.md carry every
// gate, and report.html renders its Vega-Lite plots as SVG that headless Chromium
// draws: the DOM it built holds each chart's marks, and its screenshot is not blank.
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { PNG } from 'pngjs';
import { describe, expect, it } from 'vitest';
import { gate, overall, writeReport, type Plot } from '../../src/poc/report.js';
import { headless } from '../helpers/chromium.js';

const plots: Plot[] = [
  { id: 'loss', title: 'Loss', rows: Array.from({ length: 50 }, (_, s) => ({ step: s, loss: 5 * Math.exp(-s / 20) + 1 })),
    spec: { mark: 'line', encoding: { x: { field: 'step', type: 'quantitative' }, y: { field: 'loss', type: 'quantitative' } } } },
  { id: 'busbw', title: 'Bus bandwidth', rows: [8, 1024, 1 << 20, 1 << 26].map((b, i) => ({ bytes: b, busbw: [0.01, 0.3, 1.1, 1.3][i] })),
    spec: { mark: { type: 'line', point: true }, encoding: { x: { field: 'bytes', type: 'quantitative', scale: { type: 'log' } }, y: { field: 'busbw', type: 'quantitative' } } } },
  { id: 'latency', title: 'Latency', rows: Array.from({ length: 300 }, (_, i) => ({ ms: 20 + ((i * 37) % 100) })),
    spec: { mark: 'bar', encoding: { x: { field: 'ms', type: 'quantitative', bin: { maxbins: 20 } }, y: { aggregate: 'count', type: 'quantitative' } } } },
];

describe('POC report', () => {
  it('gates decide the verdict', () => {
    const ok = gate({ stage: 'connectivity', name: 'busbw', measured: 1.3, threshold: 1, kind: 'min', unit: 'GB/s' });
    const bad = gate({ stage: 'inference', name: 'p95 latency', measured: 250, threshold: 200, kind: 'max', unit: 'ms' });
    const skip = gate({ stage: 'canary', name: 'latency not worse', measured: null, threshold: 0.05, kind: 'min', unit: 'p' });
    expect([ok.verdict, bad.verdict, skip.verdict]).toEqual(['pass', 'fail', 'skipped']);
    expect(overall([ok, skip])).toBe('pass');
    expect(overall([ok, bad, skip])).toBe('fail');
  });

  it('writes json, markdown and an HTML page whose plots Chromium renders', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'nccl-node-report-'));
    const gates = [
      gate({ stage: 'connectivity', name: 'busbw at 64 MiB', measured: 1.3, threshold: 1, kind: 'min', unit: 'GB/s' }),
      gate({ stage: 'inference', name: 'p95 latency', measured: 250, threshold: 200, kind: 'max', unit: 'ms', note: 'CI [231, 270]' }),
    ];
    const w = await writeReport(dir, { title: 'POC smoke', startedAt: '2026-01-01T00:00:00Z', finishedAt: '2026-01-01T00:05:00Z', gates, metrics: { tokens: 1e6 }, plots });
    expect(w.verdict).toBe('fail');
    const json = JSON.parse(readFileSync(w.files.json, 'utf8'));
    expect(json.gates).toEqual(gates);
    expect(json.environment.node).toBe(process.version);
    const md = readFileSync(w.files.md, 'utf8');
    expect(md).toContain('| inference | p95 latency | 250 | <= 200 | ms | FAIL | CI [231, 270] |');
    expect(md).toContain('Verdict: **FAIL**');
    const page = readFileSync(w.files.html, 'utf8');
    expect(page).not.toMatch(/<script|(?:src|href)\s*=\s*["']?https?:/i); // self-contained, nothing fetched
    const url = pathToFileURL(w.files.html).href;
    const dom = headless(url, ['--dump-dom']);
    for (const p of plots) {
      const fig = new RegExp(`<figure id="${p.id}">([\\s\\S]*?)</figure>`).exec(dom)?.[1] ?? '';
      expect(fig, `figure ${p.id} in Chromium's DOM`).toMatch(/<svg[^>]*class="marks"/);
      expect((fig.match(/<path/g) ?? []).length, `marks of ${p.id}`).toBeGreaterThan(3);
    }
    const shot = join(dir, 'shot.png');
    headless(url, [`--screenshot=${shot}`, '--window-size=1200,1600', '--hide-scrollbars']);
    const png = PNG.sync.read(readFileSync(shot));
    let dark = 0, colored = 0;
    for (let i = 0; i < png.data.length; i += 4) {
      const [r, g, b] = [png.data[i]!, png.data[i + 1]!, png.data[i + 2]!];
      if (r + g + b < 300) dark++;
      if (Math.abs(r - b) > 60 || Math.abs(g - b) > 60) colored++; // chart lines and bars, red/green verdicts
    }
    expect(dark, 'text and axes').toBeGreaterThan(2000);
    expect(colored, 'colored marks').toBeGreaterThan(500);
  }, 900_000);
});
