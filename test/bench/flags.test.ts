/** nccl-tests' flags: names, defaults, size suffixes, and what Gloo cannot honour. */
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { resolveConfig, UsageError } from '../../src/nccl-tests/config.js';
import { addBenchOptions, parseCInt, parseSize, type BenchFlags } from '../../src/nccl-tests/flags.js';

function parse(args: string[]): BenchFlags {
  const cmd = addBenchOptions(new Command('bench').exitOverride().argument('[test]').action(() => {}));
  cmd.parse(args, { from: 'user' });
  return cmd.opts() as BenchFlags;
}

describe('flags', () => {
  it('defaults are nccl-tests 2.19.6 global initial values', () => {
    const f = parse([]);
    expect(f).toMatchObject({
      nthreads: 1, ngpus: 1, minbytes: 33554432, maxbytes: 33554432, stepbytes: 1048576, stepfactor: 1, iters: 20,
      agg_iters: 1, warmup_iters: 1, run_cycles: 1, parallel_init: 0, check: 1, op: 'sum', datatype: 'float', root: 0,
      blocking: 0, stream_null: 0, timeout: 0, cudagraph: 0, report_cputime: 0, report_timestamps: 0, average: 1,
      local_register: 0, device_implementation: 0, device_cta_count: 16, memory: 0, unalign: 0, per_iter_timing: 0,
      per_iter_skip: 0, backend: 'auto', checkCollectives: true,
    });
    expect(f.output_file).toBeUndefined();
    expect(f.cta_policy).toBeUndefined();
  });
  it('short and long names, getopt style', () => {
    const f = parse(['all_reduce', '-b', '8', '-e', '512M', '-f', '2', '-g', '1', '-n100', '--warmup_iters=5', '-r', '-1', '-o', 'all', '-d', 'half', '-J', 'x.json']);
    expect(f).toMatchObject({ minbytes: 8, maxbytes: 512 * 2 ** 20, stepfactor: 2, iters: 100, warmup_iters: 5, root: -1, op: 'all', datatype: 'half', output_file: 'x.json' });
    const g = parse(['--minbytes', '1K', '--maxbytes', '1G', '--iters', '0x10', '--agg_iters', '4', '--run_cycles', '3', '--check', '0', '--blocking', '3', '--timeout', '9', '--cudagraph', '2', '--report_cputime', '1', '--report_timestamps', '1', '--average', '3', '--local_register', '1', '--memory', '1', '--unalign', '2', '--per_iter_timing', '1', '--per_iter_skip', '2', '--nproc-per-node', '4', '--backend', 'gloo', '--csv', 'r.csv']);
    expect(g).toMatchObject({ minbytes: 1024, maxbytes: 2 ** 30, iters: 16, agg_iters: 4, run_cycles: 3, check: 0, blocking: 3, timeout: 9, cudagraph: 2, report_cputime: 1, report_timestamps: 1, average: 3, local_register: 1, memory: 1, unalign: 2, per_iter_timing: 1, per_iter_skip: 2, nprocPerNode: 4, backend: 'gloo', csv: 'r.csv' });
  });
  it('sizes: binary K/M/G, decimals, bad suffixes rejected', () => {
    expect(parseSize('8')).toBe(8);
    expect(parseSize('1k')).toBe(1024);
    expect(parseSize('1.5M')).toBe(1.5 * 2 ** 20);
    expect(parseSize('8G')).toBe(8 * 2 ** 30);
    expect(parseSize('8X')).toBe(-1);
    expect(() => parse(['-b', '8X'])).toThrow(/invalid size specified for 'minbytes'/);
    expect(parseCInt('010')).toBe(8);
    expect(parseCInt('-1')).toBe(-1);
    expect(() => parseCInt('abc')).toThrow();
  });
});

describe('config', () => {
  it('GPU-only flags on Gloo: a clear message, and the run goes on without them', () => {
    const c = resolveConfig(parse(['-G', '10', '-R', '1', '-M', '1']), 'gloo');
    expect(c.flags.cudagraph).toBe(0);
    expect(c.warnings.join('\n')).toMatch(/-G 10: CUDA graphs need the nccl backend/);
    expect(c.warnings.join('\n')).toMatch(/-R 1: buffer registration needs the nccl backend/);
  });
  it('type and op sweeps; nccl-tests fallbacks for unknown names', () => {
    expect(resolveConfig(parse(['-d', 'all']), 'gloo').types.map((t) => t.name)).toEqual(['int8', 'uint8', 'int32', 'uint32', 'int64', 'uint64', 'half', 'float', 'double', 'bfloat16']);
    expect(resolveConfig(parse(['-o', 'all']), 'gloo').ops.map((o) => o.name)).toEqual(['sum', 'prod', 'max', 'min', 'avg']);
    const bad = resolveConfig(parse(['-d', 'float7', '-o', 'xor']), 'gloo');
    expect(bad.notices).toEqual(['invalid type float7, defaulting to float .. ', 'invalid op xor, defaulting to sum .. ']);
    expect(() => resolveConfig(parse(['-o', 'mulsum']), 'gloo')).toThrow(UsageError);
    expect(() => resolveConfig(parse(['-b', '2M', '-e', '1M']), 'gloo')).toThrow(/invalid sizes for 'minbytes' and 'maxbytes'/);
    expect(() => resolveConfig(parse(['-g', '8']), 'gloo')).toThrow(/one rank per process/);
  });
});
