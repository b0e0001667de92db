/**
 * `plan --svg` and `simulate --svg`: the SVGs parse as XML (Python's xml.etree, not
 * the renderer's own code), hold one point per interval / data-parallel size and one
 * bar per layout and state part, with values the plan computes; and headless
 * Chromium lays the marks out with a non-empty box.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { firstOrderEttr, INTERVAL_FACTORS, plan } from '../../src/plan/index.js';
import { headless } from '../helpers/chromium.js';
import { repoRoot } from '../helpers/ranks.js';

const dir = mkdtempSync(join(tmpdir(), 'nccl-node-plots-test-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const cli = (args: string[]) => spawnSync(process.execPath, [join(repoRoot, 'bin/nccl-node.js'), ...args], { encoding: 'utf8', timeout: 50_000 });

/** Marks by their aria role description, and each mark's aria-label, read by Python's XML parser. */
function marks(file: string): { role: string; label: string }[] {
  const py = `
import json, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
print(json.dumps([{"role": e.get("aria-roledescription"), "label": e.get("aria-label") or ""} for e in root.iter() if e.get("role") == "graphics-symbol"]))`;
  return JSON.parse(execFileSync('python3', ['-c', py, file], { encoding: 'utf8' })) as { role: string; label: string }[];
}

const ARGS = ['--layers', '8', '--hidden', '1024', '--heads', '16', '--seq', '2048', '--vocab', '32000', '--tokens', '1e11', '--gpus', '64', '--checkpoint-seconds', '20'];

describe('plan --svg', () => {
  const out = join(dir, 'plan');
  const r = cli(['plan', ...ARGS, '--svg', out, '--json']);
  const result = plan({ model: { layers: 8, hidden: 1024, heads: 16, seq: 2048, vocab: 32000 }, tokens: 1e11, cluster: { count: 64 }, checkpointSeconds: 20 });

  it('goodput vs interval: one point per interval factor, goodput = tokens/s × first-order ETTR', () => {
    expect(r.status, r.stderr).toBe(0);
    const pts = marks(join(out, 'goodput-vs-interval.svg')).filter((m) => m.role === 'point');
    expect(pts).toHaveLength(INTERVAL_FACTORS.length);
    const { youngIntervalSeconds: young, fleetMtbfSeconds: M } = result.reliability;
    // The point at Young's interval (factor 1) carries tokens/s × ETTR(τ) in its label.
    const expected = result.tokensPerSecond * firstOrderEttr(young, 20, M, 600);
    const at = pts[INTERVAL_FACTORS.indexOf(1)]!.label;
    const value = Number(/goodput \(tokens\/s\): ([\d.,e+-]+)/.exec(at)![1]!.replace(/,/g, ''));
    expect(value / expected).toBeCloseTo(1, 3);
  });

  it('MFU vs dp: one point per dp = 1, 2, 4 … up to the chosen layout\'s', () => {
    const dp = result.best.layout.dp;
    const pts = marks(join(out, 'mfu-vs-dp.svg')).filter((m) => m.role === 'point');
    expect(pts).toHaveLength(Math.ceil(Math.log2(dp)) + 1);
  });

  it('memory per layout: four stacked bars per layout (the best and the alternatives)', () => {
    const bars = marks(join(out, 'memory-per-layout.svg')).filter((m) => m.role === 'bar');
    expect(bars).toHaveLength(4 * (1 + result.alternatives.length));
    const l = result.best.layout;
    expect(bars.some((b) => b.label.includes(`dp${l.dp} tp${l.tp} pp${l.pp}`))).toBe(true);
  });

  it('headless Chromium lays out every point and bar', () => {
    for (const [name, role, n] of [['goodput-vs-interval', 'point', INTERVAL_FACTORS.length], ['memory-per-layout', 'bar', 4 * (1 + result.alternatives.length)]] as const) {
      const page = join(dir, `${name}.html`);
      writeFileSync(page, `<!doctype html><html><body>${readFileSync(join(out, `${name}.svg`), 'utf8')}<script>
document.body.dataset.drawn = [...document.querySelectorAll('[aria-roledescription="${role}"]')].filter((e) => { const b = e.getBBox(); return b.width > 0 || b.height > 0; }).length;
</script></body></html>`);
      const dom = headless(pathToFileURL(page).href, ['--dump-dom']);
      expect(dom).toContain(`data-drawn="${n}"`);
    }
  }, 60_000);
});

describe('simulate --svg', () => {
  it('one point per swept interval', () => {
    const out = join(dir, 'sim');
    const r = cli(['simulate', '--hours', '500', '--gpus', '4096', '--seeds', '2', '--intervals', '300,600,1200,2400', '--checkpoint-seconds', '30', '--svg', out]);
    expect(r.status, r.stderr).toBe(0);
    expect(marks(join(out, 'goodput-vs-interval.svg')).filter((m) => m.role === 'point')).toHaveLength(4);
  });
});
