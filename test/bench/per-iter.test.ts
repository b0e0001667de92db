/**
 * -I 1 (per-iteration timing) on Gloo at 2 ranks: the JSON carries nccl-tests 2.19's
 * per_process_max_times_us (one row of every iteration's time per process, in µs,
 * after times_us inside each *_per_iter object), times_us is the per-iteration max
 * over those rows, and the header says how the host path times (no CUDA events).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const CLI = new URL('../../bin/nccl-node.js', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'nn-periter-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

// writePerIterReport's key order in nccl-tests 2.19.6 (src/util.cu).
const KEYS = ['skipped_iterations', 'min_us', 'max_us', 'avg_us', 'p50_us', 'p95_us', 'p99_us', 'stdev_us', 'cv_pct', 'times_us', 'per_process_max_times_us'];

describe('bench -I 1 on Gloo', { timeout: 120_000 }, () => {
  it('JSON per_process_max_times_us and an honest header', () => {
    const json = join(dir, 'r.json');
    const r = spawnSync(process.execPath, [CLI, 'bench', 'all_reduce', '-b', '1K', '-e', '4K', '-f', '4', '-n', '5', '-I', '1', '-K', '1', '-J', json, '--nproc-per-node', '2'], { encoding: 'utf8', timeout: 120_000 });
    expect(r.status, r.stderr).toBe(0);
    const header = r.stdout.split('\n').find((l) => l.startsWith('# Per-Iteration Report:'));
    expect(header).toBe('# Per-Iteration Report: host completion timing; i_* uses max over process rows; summary skips first 1 iterations ');
    const doc = JSON.parse(readFileSync(json, 'utf8'));
    expect(doc.results).toHaveLength(2);
    for (const res of doc.results) {
      for (const key of ['out_of_place_per_iter', 'in_place_per_iter']) {
        const p = res[key];
        expect(Object.keys(p)).toEqual(KEYS);
        const rowsUs: number[][] = p.per_process_max_times_us;
        expect(rowsUs).toHaveLength(2);
        for (const row of rowsUs) {
          expect(row).toHaveLength(5);
          for (const t of row) expect(t).toBeGreaterThan(0);
        }
        expect(p.times_us).toEqual(rowsUs[0]!.map((t, i) => Math.max(t, rowsUs[1]![i]!)));
        const summary = [...p.times_us.slice(1)].sort((a: number, b: number) => a - b);
        expect(p.skipped_iterations).toBe(1);
        expect(p.min_us).toBe(summary[0]);
        expect(p.max_us).toBe(summary.at(-1));
      }
    }
  });
});
