// The project's declarations of NVIDIA's ABIs against the real headers and libraries:
// compiles test/abi/abi_check.cpp (its static_asserts are the checks), runs it against
// the real libnccl.so.2 / libcufile.so.0, and checks that its tables list every symbol
// the loaders bind, so a function added to a loader without a check fails here.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { nvidiaReference, root } from '../real/nvidia-reference.js';

const ref = nvidiaReference();
const source = join(root, 'test/abi/abi_check.cpp');

function compile(extra: string[]) {
  const r = ref!;
  // nccl.h includes the CUDA runtime headers (for cudaStream_t): the toolkit's, else a shim.
  const runtime = existsSync('/usr/local/cuda/include/cuda_runtime.h') ? '/usr/local/cuda/include' : join(root, 'test/abi/shim');
  const out = join(mkdtempSync(join(tmpdir(), 'nccl-node-abi-')), 'abi_check');
  const args = ['-std=c++17', '-Wall', '-I', join(root, 'native'), '-I', r.include.cuda, '-I', r.include.nccl,
    '-I', r.include.cufile, '-I', runtime, ...extra, source,
    ...['native/nccl/nccl_api.cpp', 'native/cuda/dl.cpp', 'native/core/errors.cpp'].map((f) => join(root, f)),
    '-ldl', '-o', out];
  const c = spawnSync('g++', args, { encoding: 'utf8', timeout: 300_000 });
  return { ...c, out };
}

// X(...) rows of `#define NAME(X)` in abi_check.cpp.
function table(name: string): string[][] {
  const text = readFileSync(source, 'utf8');
  const start = text.indexOf(`#define ${name}(X)`);
  expect(start, name).toBeGreaterThanOrEqual(0);
  const lines: string[] = [];
  for (const line of text.slice(start).split('\n')) {
    lines.push(line);
    if (!line.trimEnd().endsWith('\\')) break;
  }
  return [...lines.join('\n').matchAll(/X\(([^)]*)\)/g)].map((m) => m[1]!.split(',').map((s) => s.trim().replace(/"/g, '')));
}

// [field, symbol] pairs a loader binds: bind(..., a.Field, "name" ...) and a.Field = ...symbol(a.lib, "name").
function loaderBinds(file: string): string[] {
  const text = readFileSync(join(root, file), 'utf8');
  const pairs = [...text.matchAll(/a\.(\w+),\s*"(\w+)"/g), ...text.matchAll(/a\.(\w+) = reinterpret_cast<[^;]*?symbol\(a\.lib, "(\w+)"\)/g)];
  return pairs.filter((m) => m[1] !== 'lib').map((m) => `${m[1]} ${m[2]}`).sort();
}

describe.skipIf(!ref)('ABI: the project declarations against the real NVIDIA headers', () => {
  it('abi_check.cpp compiles (every static_assert holds) and passes against the real libraries', () => {
    const c = compile([]);
    expect(c.status, `g++ rejected the project's declarations:\n${c.stderr}`).toBe(0);
    const run = spawnSync(c.out, [ref!.libnccl, ref!.libcufile], { encoding: 'utf8', timeout: 60_000 });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toContain('ok   ncclConfigInit() == NCCL_CONFIG_INITIALIZER, byte for byte');
    expect(run.stdout).toContain('ok   libnccl.so.2 exports ncclCommRevoke');
    expect(run.stdout).toContain('ok   libcufile.so.0 exports cuFileDriverClose_v2');
    expect(run.stdout).toContain('ok   NcclApi::CommShrink bound to the real ncclCommShrink');
    expect(run.stdout).toMatch(/^0 failure\(s\)$/m);
  }, 300_000);

  it('a wrong declaration does not compile, and the error names the function and argument', () => {
    const c = compile(['-fsyntax-only', '-DABI_CHECK_SELFTEST']);
    expect(c.status).not.toBe(0);
    expect(c.stderr).toMatch(/abi::Argument<tag::ncclAllReduce, 3, int\*, ncclDataType_t>/);
    expect(c.stderr).toContain('selftest: config field order');
  }, 300_000);

  it('the tables cover every symbol the NCCL, CUDA and cuFile loaders bind', () => {
    const nccl = table('NCCL_FUNCTIONS').map(([field, fn]) => `${field} ${fn}`).sort();
    expect(nccl).toEqual(loaderBinds('native/nccl/nccl_api.cpp'));
    const cuda = [...table('CUDA_FUNCTIONS'), ...table('CUDA_FALLBACKS')].map(([field, name]) => `${field} ${name}`).sort();
    expect(cuda).toEqual(loaderBinds('native/cuda/cuda_api.cpp'));
    // Single symbols bound elsewhere (symbol(api.lib, "name")).
    const elsewhere = [...readFileSync(join(root, 'native/io/device_copy.cpp'), 'utf8').matchAll(/symbol\(api\.lib, "(\w+)"\)/g)].map((m) => m[1]);
    expect(elsewhere.length).toBeGreaterThan(0);
    expect(table('CUDA_OTHERS').map(([, name]) => name)).toEqual(elsewhere);
    const cufile = [...table('CUFILE_FUNCTIONS').map(([field, , name]) => [field, name]), ...table('CUFILE_FALLBACKS')]
      .map(([field, name]) => `${field} ${name}`).sort();
    expect(cufile).toEqual(loaderBinds('native/io/cufile_api.cpp'));
  });
});
