/** Golden files: our formatter must reproduce nccl-tests' report byte for byte. */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { footerLines, headerLines, rowBody, rowPreamble, tableHeader } from '../../src/nccl-tests/text-format.js';
import { fixed, general, getFloatStr } from '../../src/nccl-tests/printf.js';

const golden = (name: string) => readFileSync(new URL(`./golden/${name}`, import.meta.url), 'utf8');

describe('printf conversions', () => {
  it('getFloatStr falls back %.2f, %.1f, %.0f, %e as nccl-tests does', () => {
    expect(getFloatStr(18.66, 7)).toBe('  18.66');
    expect(getFloatStr(1568.3, 7)).toBe('1568.30');
    expect(getFloatStr(19477.24, 7)).toBe('19477.2');
    expect(getFloatStr(1234567, 7)).toBe('1234567');
    expect(getFloatStr(12345678, 7)).toBe('1.2e+07');
    expect(getFloatStr(123456, 6)).toBe('123456');
    expect(getFloatStr(1234567, 6)).toBe(' 1e+06');
    expect(getFloatStr(0, 6)).toBe('  0.00');
  });
  it('rounds exact ties to even like glibc', () => {
    expect(fixed(0.125, 2)).toBe('0.12');
    expect(fixed(0.375, 2)).toBe('0.38');
    expect(fixed(2.5, 0)).toBe('2');
    expect(fixed(0.1 + 0.2, 2)).toBe('0.30');
    expect(fixed(-0.001, 2)).toBe('-0.00');
  });
  it('%g', () => {
    expect(general(0)).toBe('0');
    expect(general(6.6972)).toBe('6.6972');
    expect(general(745.53)).toBe('745.53');
    expect(general(0.00402158)).toBe('0.00402158');
    expect(general(1e-5)).toBe('1e-05');
    expect(general(1234567)).toBe('1.23457e+06');
    expect(general(100000)).toBe('100000');
  });
});

describe('report layout (golden files)', () => {
  it('all_reduce_perf: header, devices, table, footer', () => {
    const dev = (rank: number) => ({ rank, group: 0, pid: 249104 + rank, host: 'node1', device: rank, pci: [0, 0, 5 + rank] as [number, number, number], name: 'NVIDIA B200' });
    const params = { nThreads: 1, nGpus: 1, minBytes: 32768, maxBytes: 67108864, stepBytes: 1048576, stepFactor: 2, warmupIters: 1, iters: 20, aggIters: 1, check: 1, graph: 0, unalign: 0, blocking: 0, perIterTiming: 0, perIterSkip: 0 };
    const row = (size: number, count: number, a: [number, number, number, number], b: [number, number, number, number]) =>
      rowPreamble(size, count, 'float', 'sum', -1) +
      rowBody({ timeUs: a[0], algBw: a[1], busBw: a[2], wrong: a[3] }) +
      rowBody({ timeUs: b[0], algBw: b[1], busBw: b[2], wrong: b[3] });
    const lines = [
      ...headerLines('all_reduce_perf', params, [dev(0), dev(1)]),
      ...tableHeader(false, false, false),
      row(32768, 8192, [18.66, 1.76, 3.07, 0], [17.95, 1.83, 3.2, 0]),
      row(33554432, 8388608, [195.4, 171.72, 300.51, 0], [195.4, 171.73, 300.52, 0]),
      row(67108864, 16777216, [1568.3, 21.4, 21.4, 0], [19477.24, 1234.5, 12345.4, 3]),
      ...footerLines('all_reduce_perf', 1, 6.6972, undefined),
    ];
    expect(`${lines.join('\n')}\n`).toBe(golden('all_reduce_perf.txt'));
  });

  it('cputime and timestamp columns, N/A, NCCL_TESTS_MIN_BW verdict and the error line', () => {
    const lines = [
      ...tableHeader(true, true, false),
      rowPreamble(1024, 64, 'half', 'none', -1) + rowBody({ timeUs: 12345678, algBw: 1234567, busBw: 0.001, wrong: 0 }) + rowBody({ timeUs: 0.125, algBw: 0.375, busBw: -0.001, wrong: undefined }),
      ...footerLines('alltoall_perf', 0, 1234567, 1000, 'boom'),
    ];
    expect(`${lines.join('\n')}\n`).toBe(golden('alltoall_perf.txt'));
  });
});
