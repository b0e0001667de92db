/**
 * Real runs on Gloo at 2 and 4 ranks (small sizes): the output must parse like
 * nccl-tests' (every data line has 13 fields), results must be right, and a
 * deliberately corrupted element must be counted and give exit code 7.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { compareDocs } from '../../src/nccl-tests/compare.js';

const CLI = new URL('../../bin/nccl-node.js', import.meta.url).pathname;

function bench(args: string[], env: Record<string, string> = {}) {
  const r = spawnSync(process.execPath, [CLI, 'bench', ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 120_000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

/** What an nccl-tests parser does: skip '#' lines, split rows on whitespace. */
function rows(out: string) {
  return out.split('\n').filter((l) => l.trim() && !l.startsWith('#')).map((l) => l.trim().split(/\s+/));
}

describe('bench on Gloo', { timeout: 120_000 }, () => {
  it('all_reduce at 2 ranks: nccl-tests layout, no wrong elements, exit 0', () => {
    const r = bench(['all_reduce_perf', '-b', '8', '-e', '4K', '-f', '8', '-n', '3', '--nproc-per-node', '2']);
    expect(r.code, r.err).toBe(0);
    const lines = r.out.split('\n');
    expect(lines[0]).toMatch(/^# nccl-node version \S+ nccl-tests-format 2\.19\.6 backend=gloo gloo-library=/);
    expect(lines[1]).toBe('# Collective test starting: all_reduce_perf');
    expect(lines.filter((l) => l.startsWith('#  Rank '))).toHaveLength(2);
    const data = rows(r.out);
    expect(data.map((d) => d[0])).toEqual(['8', '64', '512', '4096']);
    for (const d of data) {
      expect(d).toHaveLength(13);
      expect(d.slice(2, 5)).toEqual(['float', 'sum', '-1']);
      expect([d[8], d[12]]).toEqual(['0', '0']);
    }
    expect(r.out).toMatch(/# Out of bounds values : 0 OK\n# Avg bus bandwidth    : \S+ \n#\n# Collective test concluded: all_reduce_perf\n#\n\n$/);
  });

  it('every collective at 2 ranks validates (int32, avg where reducing)', () => {
    for (const t of ['all_gather', 'broadcast', 'reduce_scatter', 'reduce', 'alltoall', 'gather', 'scatter', 'sendrecv', 'hypercube']) {
      const r = bench([t, '-b', '1K', '-e', '1K', '-n', '1', '-d', 'int32', '-o', 'avg', '-r', '1', '--nproc-per-node', '2']);
      expect(r.code, `${t}: ${r.err}`).toBe(0);
      const [d] = rows(r.out);
      // From the right: hypercube's redop column is empty, as in nccl-tests.
      expect(d!.at(-5), t).toBe('0');
      expect(d!.at(-1), t).toBe(t === 'alltoall' || t === 'sendrecv' ? 'N/A' : '0');
    }
  });

  it('4 ranks, every root, JSON and CSV written', () => {
    const dir = mkdtempSync(join(tmpdir(), 'bench-'));
    const json = join(dir, 'r.json');
    const r = bench(['reduce', '-b', '256', '-e', '256', '-n', '2', '-r', '-1', '-J', json, '--csv', join(dir, 'r.csv'), '--nproc-per-node', '4']);
    expect(r.code, r.err).toBe(0);
    expect(r.out.split('\n')[0]).toBe(`# Writing JSON output to ${json}`);
    expect(rows(r.out).map((d) => d[4])).toEqual(['0', '1', '2', '3']);
    const doc = JSON.parse(readFileSync(json, 'utf8'));
    expect(doc.version).toBe(3);
    expect(doc.results).toHaveLength(4);
    expect(doc.results[0].out_of_place.nwrong).toBe(0);
    expect(doc.config.devices).toHaveLength(4);
    expect(doc.nccl_node).toMatchObject({ backend: 'gloo', world_size: 4 });
    expect(doc.env.some((e: string) => e.startsWith('NCCL_NODE_TOKEN'))).toBe(false);
    const csv = readFileSync(join(dir, 'r.csv'), 'utf8').trim().split('\n');
    expect(csv).toHaveLength(1 + 4 + 1);
    expect(csv.at(-1)).toMatch(/^summary,reduce,/);
    // Comparing a run with itself: every ratio is 1, nothing regressed.
    expect(compareDocs(doc, doc, 5).regressions).toBe(0);
  });

  it('a corrupted element on one rank is counted and gives exit 7', () => {
    const r = bench(['all_reduce', '-b', '64', '-e', '128', '-f', '2', '-n', '1', '--nproc-per-node', '2'], { NCCL_NODE_BENCH_CORRUPT: '1' });
    expect(r.code).toBe(7);
    for (const d of rows(r.out)) expect([d[8], d[12]]).toEqual(['1', '1']);
    expect(r.out).toContain('# Out of bounds values : 4 FAILED'); // 2 sizes x (out-of-place, in-place)
  });

  it('NCCL_TESTS_MIN_BW missed: FAILED verdict and exit 7', () => {
    const r = bench(['sendrecv', '-b', '64', '-e', '64', '-n', '1'], { NCCL_TESTS_MIN_BW: '1000' });
    expect(r.code).toBe(7);
    expect(r.out).toMatch(/# Avg bus bandwidth    : \S+ FAILED\n/);
  });
});

describe('compare', () => {
  it('prints the ratio per size and flags drops beyond the threshold', () => {
    const row = (size: number, bw: number) => ({ size, type: 'float', redop: 'sum', root: '    -1', out_of_place: { bus_bw: bw }, in_place: { bus_bw: bw } });
    const a = { results: [row(8, 1), row(1024, 10)], average_bus_bandwidth: { bandwidth: 5.5 } };
    const b = { results: [row(8, 0.99), row(1024, 8)], average_bus_bandwidth: { bandwidth: 4.5 } };
    const c = compareDocs(a, b, 5);
    expect(c.regressions).toBe(1);
    expect(c.lines.find((l) => l.includes(' 1024 '))).toMatch(/0\.80\s+<<$/);
    expect(c.lines.find((l) => /^\s+8 /.test(l))).not.toMatch(/<</);
  });
});
