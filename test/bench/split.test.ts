// NCCL_TESTS_SPLIT / NCCL_TESTS_SPLIT_MASK (groups made with comm.split, each running
// the test; rows, #wrong and times span the world, as nccl-tests' MPI_COMM_WORLD
// exchanges) and NCCL_TESTS_DEVICE (first GPU index), on Gloo and the NCCL stand-in.
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { UsageError } from '../../src/nccl-tests/config.js';
import { firstDevice, splitColor, strtoulInt } from '../../src/nccl-tests/split.js';
import { standinEnv } from '../gpu/helpers.js';

const CLI = new URL('../../bin/nccl-node.js', import.meta.url).pathname;

function bench(args: string[], env: Record<string, string> = {}) {
  const r = spawnSync(process.execPath, [CLI, 'bench', ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 150_000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}
const rows = (out: string) => out.split('\n').filter((l) => l.trim() && !l.startsWith('#')).map((l) => l.trim().split(/\s+/));
/** [rank, group, device] of each "#  Rank" line. */
const rankLines = (out: string) =>
  [...out.matchAll(/^#  Rank +(\d+) Group +(\d+) Pid +\d+ on +\S+ device +(-?\d+) /gm)].map((m) => [Number(m[1]), Number(m[2]), Number(m[3])]);

describe('split expressions, as common.cu parses them', () => {
  const colors = (env: Record<string, string>, n = 8) => [...Array(n).keys()].map((p) => splitColor(env, p));
  it('AND / OR / MOD / DIV and their operators, any case, decimal, hex, octal and 0b', () => {
    expect(colors({ NCCL_TESTS_SPLIT: 'AND 1' })).toEqual([0, 1, 0, 1, 0, 1, 0, 1]);
    expect(colors({ NCCL_TESTS_SPLIT: '&0x6' })).toEqual([0, 0, 2, 2, 4, 4, 6, 6]);
    expect(colors({ NCCL_TESTS_SPLIT: 'or 4' })).toEqual([4, 5, 6, 7, 4, 5, 6, 7]);
    expect(colors({ NCCL_TESTS_SPLIT: '| 010' })).toEqual([8, 9, 10, 11, 12, 13, 14, 15]);
    expect(colors({ NCCL_TESTS_SPLIT: 'MOD 3' })).toEqual([0, 1, 2, 0, 1, 2, 0, 1]);
    expect(colors({ NCCL_TESTS_SPLIT: '%2' })).toEqual([0, 1, 0, 1, 0, 1, 0, 1]);
    expect(colors({ NCCL_TESTS_SPLIT: 'Div 0b11' })).toEqual([0, 0, 0, 1, 1, 1, 2, 2]);
    expect(colors({ NCCL_TESTS_SPLIT: '/ 4' })).toEqual([0, 0, 0, 0, 1, 1, 1, 1]);
  });
  it('not understood: one group (color 0); the older mask is hex and wins', () => {
    expect(colors({ NCCL_TESTS_SPLIT: 'XOR 1' })).toEqual(Array(8).fill(0));
    expect(colors({ NCCL_TESTS_SPLIT: 'MOD x' })).toEqual(Array(8).fill(0));
    expect(colors({})).toEqual(Array(8).fill(0));
    expect(colors({ NCCL_TESTS_SPLIT_MASK: '6' })).toEqual([0, 0, 2, 2, 4, 4, 6, 6]);
    expect(colors({ NCCL_TESTS_SPLIT_MASK: '0x10', NCCL_TESTS_SPLIT: 'MOD 2' }, 18).slice(15)).toEqual([0, 16, 16]);
  });
  it('MOD 0 and DIV 0 (a crash in nccl-tests) are usage errors', () => {
    expect(() => splitColor({ NCCL_TESTS_SPLIT: 'MOD 0' }, 1)).toThrow(UsageError);
    expect(() => splitColor({ NCCL_TESTS_SPLIT: '/0' }, 1)).toThrow(/division by zero/);
  });
  it('strtoul: sign, saturation, stops at the first non-digit; NCCL_TESTS_DEVICE as atoi', () => {
    expect(strtoulInt(' -1', 0)).toEqual({ value: -1, end: 3 });
    expect(strtoulInt('99999999999999999999999', 10)?.value).toBe(-1);
    expect(strtoulInt('0x1fz', 0)).toEqual({ value: 31, end: 4 });
    expect(strtoulInt('ff', 16)?.value).toBe(255);
    expect(strtoulInt('z', 10)).toBeNull();
    expect(firstDevice({ NCCL_TESTS_DEVICE: '3abc' })).toBe(3);
    expect(firstDevice({ NCCL_TESTS_DEVICE: '-1' })).toBeUndefined();
    expect(firstDevice({})).toBeUndefined();
  });
});

describe('NCCL_TESTS_SPLIT on Gloo, 4 ranks', { timeout: 150_000 }, () => {
  it('MOD 2: groups {0,2} and {1,3}; counts are per group of 2; results right', () => {
    const r = bench(['all_gather', '-b', '1K', '-e', '4K', '-f', '4', '-n', '2', '-w', '0', '--nproc-per-node', '4'], { NCCL_TESTS_SPLIT: 'MOD 2' });
    expect(r.code, r.err).toBe(0);
    expect(rankLines(r.out)).toEqual([[0, 0, -1], [1, 1, -1], [2, 0, -1], [3, 1, -1]]);
    // all_gather's count is bytes / (4 * group size): 2 ranks per group, not 4.
    expect(rows(r.out).map((d) => [d[0], d[1], d[8], d[12]])).toEqual([['1024', '128', '0', '0'], ['4096', '512', '0', '0']]);
  });

  it('SPLIT_MASK 0x2: groups {0,1} and {2,3}; an all-reduce checked against 2-rank sums; #wrong spans the world', () => {
    const args = ['all_reduce', '-b', '256', '-e', '256', '-n', '1', '-w', '0', '-d', 'int32', '--nproc-per-node', '4'];
    const r = bench(args, { NCCL_TESTS_SPLIT_MASK: '0x2' });
    expect(r.code, r.err).toBe(0);
    expect(rankLines(r.out).map((l) => l[1])).toEqual([0, 0, 2, 2]);
    expect(rows(r.out).map((d) => [d[1], d[8], d[12]])).toEqual([['64', '0', '0']]);
    // Rank 3 is not in rank 0's group, yet its wrong element reaches the printed row.
    const bad = bench(args, { NCCL_TESTS_SPLIT_MASK: '0x2', NCCL_NODE_BENCH_CORRUPT: '3' });
    expect(bad.code).toBe(7);
    expect(rows(bad.out).map((d) => [d[8], d[12]])).toEqual([['1', '1']]);
  });

  it('groups of unequal size with -r -1, and MOD 0, are usage errors (exit 6)', () => {
    const r = bench(['broadcast', '-b', '64', '-e', '64', '-n', '1', '-r', '-1', '--nproc-per-node', '4'], { NCCL_TESTS_SPLIT: 'DIV 3' });
    expect(r.code).toBe(6);
    expect(r.err).toMatch(/groups of 1 to 3 ranks/);
    const z = bench(['all_reduce', '-b', '64', '-e', '64', '-n', '1', '--nproc-per-node', '2'], { NCCL_TESTS_SPLIT: 'MOD 0' });
    expect(z.code).toBe(6);
  });
});

describe('NCCL stand-in: split groups and NCCL_TESTS_DEVICE', { timeout: 150_000 }, () => {
  it('DIV 2 with NCCL_TESTS_DEVICE=5: every rank on device 5, prod/half verified per group', () => {
    const r = bench(['all_reduce', '--backend', 'nccl', '-b', '1K', '-e', '1K', '-n', '1', '-w', '0', '-o', 'prod', '-d', 'half', '--nproc-per-node', '4'],
      { ...standinEnv(), NCCL_TESTS_SPLIT: 'DIV 2', NCCL_TESTS_DEVICE: '5' });
    expect(r.code, r.err).toBe(0);
    expect(rankLines(r.out)).toEqual([[0, 0, 5], [1, 0, 5], [2, 1, 5], [3, 1, 5]]);
    expect(rows(r.out).map((d) => [d[1], d[8], d[12]])).toEqual([['512', '0', '0']]);
  });

  it('NCCL_TESTS_DEVICE past the last GPU: nccl-tests\' message and exit 5', () => {
    const r = bench(['all_reduce', '--backend', 'nccl', '-b', '64', '-e', '64', '--nproc-per-node', '2'],
      { ...standinEnv(), NCCL_TESTS_DEVICE: '8', CUDA_STANDIN_DEVICES: '8' });
    expect(r.code).toBe(5);
    expect(r.err).toContain('Invalid number of GPUs: 9 requested but only 8 were found.');
  });
});
