/**
 * `nccl-node run --cpu-bind exclusive`: each local rank on its own share of the launcher's
 * CPUs. The partition is checked on made-up sysfs topologies (NUMA nodes, packages,
 * hyperthreads); the binding itself against what the kernel reports for every thread of
 * each rank (/proc/<pid>/task/<tid>/status), through the real CLI.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

import { isNcclNodeError } from '../../src/errors.js';
import { cpuPlaces, exclusiveCpus, formatCpuList, parseCpuList } from '../../src/launch/cpu-bind.js';
import { resolveOptions } from '../../src/launch/options.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.join(ROOT, 'bin/nccl-node.js');
const FIXTURE = 'test/launch/fixtures/affinity.mjs';
const scratch = mkdtempSync(path.join(tmpdir(), 'cpu-bind-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/**
 * A sysfs tree: `nodes` NUMA nodes (one package each) of `cores` cores with `threads`
 * hyperthreads, numbered as Linux does on x86 (first threads 0..N-1, node by node, then
 * their siblings N..2N-1).
 */
function fakeSysfs(name: string, nodes: number, cores: number, threads: number): string {
  const root = path.join(scratch, name);
  const n = nodes * cores;
  const nodeCpus: number[][] = Array.from({ length: nodes }, () => []);
  for (let t = 0; t < threads; t++) {
    for (let i = 0; i < n; i++) {
      const cpu = t * n + i;
      const node = Math.floor(i / cores);
      const topo = path.join(root, 'cpu', `cpu${cpu}`, 'topology');
      mkdirSync(topo, { recursive: true });
      writeFileSync(path.join(topo, 'physical_package_id'), `${node}\n`);
      writeFileSync(path.join(topo, 'core_id'), `${i % cores}\n`);
      nodeCpus[node]!.push(cpu);
    }
  }
  nodeCpus.forEach((cpus, node) => {
    mkdirSync(path.join(root, 'node', `node${node}`), { recursive: true });
    writeFileSync(path.join(root, 'node', `node${node}`, 'cpulist'), `${formatCpuList(cpus)}\n`);
  });
  return root;
}

const range = (lo: number, hi: number): number[] => Array.from({ length: hi - lo + 1 }, (_, i) => lo + i);

describe('the exclusive partition', () => {
  // 2 nodes x 4 cores x 2 threads: cpus 0-3 and 8-11 on node 0, 4-7 and 12-15 on node 1.
  const sys = fakeSysfs('2x4x2', 2, 4, 2);
  const all = range(0, 15);
  const lists = (nproc: number, cpus = all): string[] => exclusiveCpus(cpuPlaces(cpus, sys), nproc).map(formatCpuList);

  it('gives whole cores, siblings together, in NUMA order; one node per rank at 2 ranks', () => {
    expect(lists(1)).toEqual(['0-15']);
    expect(lists(2)).toEqual(['0-3,8-11', '4-7,12-15']);
    expect(lists(4)).toEqual(['0-1,8-9', '2-3,10-11', '4-5,12-13', '6-7,14-15']);
    expect(lists(8)).toEqual(['0,8', '1,9', '2,10', '3,11', '4,12', '5,13', '6,14', '7,15']);
  });

  it('spreads uneven counts one core apart, the first ranks taking the extra', () => {
    // 8 cores over 3 ranks: 3, 3, 2.
    expect(lists(3)).toEqual(['0-2,8-10', '3-5,11-13', '6-7,14-15']);
    const sizes = exclusiveCpus(cpuPlaces(all, sys), 5).map((l) => l.length);
    expect(sizes).toEqual([4, 4, 4, 2, 2]);
  });

  it('splits hyperthreads apart when ranks outnumber cores, and shares CPUs when they outnumber CPUs', () => {
    const sixteen = exclusiveCpus(cpuPlaces(all, sys), 16);
    expect(sixteen.map((l) => l.length)).toEqual(Array(16).fill(1));
    expect(new Set(sixteen.flat()).size).toBe(16);
    const twenty = exclusiveCpus(cpuPlaces(all, sys), 20);
    expect(new Set(twenty.flat()).size).toBe(16);
    // Neighbouring ranks share: every CPU's ranks are consecutive.
    const ranksOf = new Map<number, number[]>();
    twenty.forEach(([c], r) => ranksOf.set(c!, [...(ranksOf.get(c!) ?? []), r]));
    for (const rs of ranksOf.values()) expect(rs.at(-1)! - rs[0]!).toBe(rs.length - 1);
  });

  it('keeps to the CPUs the launcher may use', () => {
    expect(lists(2, [2, 3, 4, 5, 10, 11, 12, 13])).toEqual(['2-3,10-11', '4-5,12-13']);
  });

  it('reads and writes the kernel\'s list format', () => {
    expect(parseCpuList('0-3,8,10-11\n')).toEqual([0, 1, 2, 3, 8, 10, 11]);
    expect(formatCpuList([11, 0, 1, 2, 3, 8, 10])).toBe('0-3,8,10-11');
    expect(() => parseCpuList('0-a')).toThrow(/not a CPU list/);
  });
});

describe('resolveOptions', () => {
  const script = path.join(ROOT, FIXTURE);
  it('refuses an unknown mode with the choices', () => {
    let caught: unknown;
    try {
      resolveOptions({ script, nprocPerNode: 2, cpuBind: 'cores' as never });
    } catch (err) {
      caught = err;
    }
    expect(isNcclNodeError(caught, 'ERR_INVALID_ARGUMENT')).toBe(true);
    expect((caught as Error).message).toMatch(/none, exclusive.*"cores"/);
  });

  it('names taskset when it is not on PATH', () => {
    expect(() => resolveOptions({ script, nprocPerNode: 2, cpuBind: 'exclusive', env: { PATH: scratch } }))
      .toThrow(/taskset, which is not on PATH/);
  });
});

interface Report { rank: number; localRank: number; told: string | null; process: string; threads: string[] }

function run(args: string[], wrap: string[] = []): { code: number | null; reports: Report[]; stderr: string } {
  const cmd = [...wrap, process.execPath, BIN, 'run', ...args];
  const r = spawnSync(cmd[0]!, cmd.slice(1), { cwd: ROOT, env: { ...process.env, NCCL_NODE_TOKEN: undefined }, encoding: 'utf8', timeout: 60_000 });
  const reports = r.stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Report);
  return { code: r.status, reports: reports.sort((a, b) => a.rank - b.rank), stderr: r.stderr };
}

const mine = parseCpuList(/^Cpus_allowed_list:\s*(.*)$/m.exec(readFileSync('/proc/self/status', 'utf8'))![1]!);

describe('nccl-node run --cpu-bind', () => {
  it('binds every thread of each rank to its own share; the shares cover the launcher\'s CPUs', () => {
    const { code, reports, stderr } = run(['--nproc-per-node', '2', '--cpu-bind', 'exclusive', FIXTURE]);
    expect(code, stderr).toBe(0);
    expect(reports).toHaveLength(2);
    for (const r of reports) {
      expect(r.told).not.toBeNull();
      expect(r.process).toBe(r.told);
      expect(r.threads.length).toBeGreaterThan(1);
      for (const t of r.threads) expect(t).toBe(r.told);
    }
    const shares = reports.map((r) => parseCpuList(r.process));
    expect(shares.flat().sort((a, b) => a - b)).toEqual(mine.length >= 2 ? mine : [...mine, ...mine]);
    if (mine.length >= 2) expect(new Set(shares.flat()).size).toBe(shares.flat().length);
  });

  it('stays within a launcher started on fewer CPUs, and leaves ranks unbound without it', () => {
    const one = String(mine[mine.length - 1]);
    const inside = run(['--nproc-per-node', '2', '--cpu-bind', 'exclusive', FIXTURE], ['taskset', '-c', one]);
    expect(inside.code, inside.stderr).toBe(0);
    expect(inside.reports.map((r) => [r.told, r.process])).toEqual([[one, one], [one, one]]);
    const unbound = run(['--nproc-per-node', '2', FIXTURE]);
    expect(unbound.code, unbound.stderr).toBe(0);
    for (const r of unbound.reports) {
      expect(r.told).toBeNull();
      expect(parseCpuList(r.process)).toEqual(mine);
    }
  });

  it('passes a bound rank\'s exit code through, and refuses an unknown mode', () => {
    const failed = run(['--nproc-per-node', '2', '--cpu-bind', 'exclusive', FIXTURE, '--exit-rank', '1', '7']);
    expect(failed.code).toBe(7);
    expect(failed.stderr).toMatch(/rank 1/);
    const bad = run(['--nproc-per-node', '2', '--cpu-bind', 'cores', FIXTURE]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/expected none or exclusive/);
  });
});
