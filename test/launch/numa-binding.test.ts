/**
 * `nccl-node run --numa-binding`: each local rank on CPUs of its GPU's NUMA node. The
 * choice of CPUs is held to torch's own (torch.numa.binding from the real wheel, run on
 * the same made-up sysfs with the same GPU addresses); the binding itself to what the
 * kernel reports for every thread of each rank, through the real CLI with the stand-in
 * CUDA driver's GPUs placed on a made-up topology of this machine's CPUs (NCCL_NODE_SYSFS).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { isNcclNodeError } from '../../src/errors.js';
import { cpuPlaces, formatCpuList, parseCpuList } from '../../src/launch/cpu-bind.js';
import { numaCpus, type NumaBindingMode } from '../../src/launch/numa-binding.js';
import { resolveOptions } from '../../src/launch/options.js';
import { standinEnv } from '../gpu/helpers.js';
import { torchVenv, type TorchVenv } from './torch-venv.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.join(ROOT, 'bin/nccl-node.js');
const FIXTURE = 'test/launch/fixtures/affinity.mjs';
const TORCH_REFERENCE = path.join(ROOT, 'test/launch/fixtures/torch_numa_binding.py');
const scratch = mkdtempSync(path.join(tmpdir(), 'numa-binding-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const range = (lo: number, hi: number): number[] => Array.from({ length: hi - lo + 1 }, (_, i) => lo + i);

interface Host {
  /** Per NUMA node: its package and its physical cores, each a list of hyperthreads. */
  nodes: Array<{ pkg: number; cores: number[][] }>;
  /** Cores a last-level cache (a core complex) within each node; absent: no cache files. */
  coresPerComplex?: number;
  /** Per GPU index: PCI address and what sysfs gives as its numa_node (-1: none). */
  gpus: Array<[string, number]>;
}

/** A sysfs tree (devices/system and bus/pci) for `host`. */
function writeSysfs(name: string, host: Host): string {
  const root = path.join(scratch, name);
  const system = path.join(root, 'devices', 'system');
  host.nodes.forEach(({ pkg, cores }, node) => {
    cores.forEach((threads, core) => {
      for (const cpu of threads) {
        const topo = path.join(system, 'cpu', `cpu${cpu}`, 'topology');
        mkdirSync(topo, { recursive: true });
        writeFileSync(path.join(topo, 'physical_package_id'), `${pkg}\n`);
        writeFileSync(path.join(topo, 'core_id'), `${core}\n`);
        writeFileSync(path.join(topo, 'thread_siblings_list'), `${formatCpuList(threads)}\n`);
        if (host.coresPerComplex === undefined) continue;
        // L1d and L1i a core, L2 a core, L3 a complex (as x86 lists them).
        const first = core - (core % host.coresPerComplex);
        const complex = cores.slice(first, first + host.coresPerComplex).flat();
        const caches: Array<[string, number, number[]]> = [['Data', 1, threads], ['Instruction', 1, threads], ['Unified', 2, threads], ['Unified', 3, complex]];
        caches.forEach(([type, level, shared], k) => {
          const dir = path.join(system, 'cpu', `cpu${cpu}`, 'cache', `index${k}`);
          mkdirSync(dir, { recursive: true });
          writeFileSync(path.join(dir, 'type'), `${type}\n`);
          writeFileSync(path.join(dir, 'level'), `${level}\n`);
          writeFileSync(path.join(dir, 'shared_cpu_list'), `${formatCpuList(shared)}\n`);
        });
      }
    });
    mkdirSync(path.join(system, 'node', `node${node}`), { recursive: true });
    writeFileSync(path.join(system, 'node', `node${node}`, 'cpulist'), `${formatCpuList(cores.flat())}\n`);
  });
  writeFileSync(path.join(system, 'node', 'possible'), `0-${host.nodes.length - 1}\n`);
  for (const [pci, node] of host.gpus) {
    mkdirSync(path.join(root, 'bus', 'pci', 'devices', pci), { recursive: true });
    writeFileSync(path.join(root, 'bus', 'pci', 'devices', pci, 'numa_node'), `${node}\n`);
  }
  return root;
}

/**
 * x86 numbering: `sockets` x `perSocket` nodes of `cores` cores, first threads numbered
 * node by node, then their siblings (cpu c and c + total share a core); a last-level
 * cache per `coresPerComplex` cores of a node (default: one per node).
 */
function x86(sockets: number, perSocket: number, cores: number, gpuNodes: number[], coresPerComplex = cores): Host {
  const nodes = sockets * perSocket;
  const total = nodes * cores;
  return {
    coresPerComplex,
    nodes: range(0, nodes - 1).map((n) => ({
      pkg: Math.floor(n / perSocket),
      cores: range(0, cores - 1).map((c) => [n * cores + c, total + n * cores + c]),
    })),
    gpus: gpuNodes.map((node, i) => [`0000:${(0x18 + 0x11 * i).toString(16).padStart(2, '0')}:00.0`, node]),
  };
}

const MODES: NumaBindingMode[] = ['node', 'socket', 'exclusive', 'core-complex'];
let venv: TorchVenv;
beforeAll(async () => {
  venv = await torchVenv();
}, 20 * 60_000);

type Choice = number[] | { error: string };

/** torch's and this launcher's CPUs per local rank for each mode; a refusal as { error }. */
function both(name: string, host: Host, opts: { nproc?: number; allowed?: number[]; modes?: NumaBindingMode[] } = {}) {
  const sys = writeSysfs(name, host);
  const allowed = opts.allowed ?? host.nodes.flatMap((n) => n.cores.flat()).sort((a, b) => a - b);
  const nproc = opts.nproc ?? host.gpus.length;
  const modes = opts.modes ?? MODES;
  const gpus = host.gpus.map(([pci]) => pci);
  const spec = JSON.stringify({ gpus, allowed, nproc, modes });
  const torch = JSON.parse(execFileSync(venv.python, [TORCH_REFERENCE, sys, spec], { encoding: 'utf8' })) as Record<string, Choice[]>;
  const ours: Record<string, number[][] | { error: string }> = {};
  for (const mode of modes) {
    try {
      ours[mode] = numaCpus(mode, gpus, nproc, cpuPlaces(allowed, path.join(sys, 'devices', 'system')), sys);
    } catch (err) {
      ours[mode] = { error: String(err) };
    }
  }
  return { torch, ours, lists: (mode: NumaBindingMode) => ours[mode] as number[][] };
}

describe('the CPUs each mode picks, against torch.numa.binding', () => {
  it('two sockets, one node each, GPUs 0-3 on node 0 and 4-7 on node 1 (an 8-GPU H100 host)', () => {
    const { torch, ours, lists } = both('h100', x86(2, 1, 8, [0, 0, 0, 0, 1, 1, 1, 1]));
    expect(ours).toEqual(torch);
    // What torch's choice is, spelled out: node 0 is cpus 0-7 and 16-23.
    expect(lists('node')[0]).toEqual([...range(0, 7), ...range(16, 23)]);
    expect(lists('exclusive').slice(0, 4)).toEqual([[0, 1, 16, 17], [2, 3, 18, 19], [4, 5, 20, 21], [6, 7, 22, 23]]);
  });

  it('GPU order interleaving the nodes: 2 sockets of 4 nodes, GPUs on nodes 3, 3, 1, 1, 7, 7, 5, 5', () => {
    const { torch, ours, lists } = both('interleaved', x86(2, 4, 4, [3, 3, 1, 1, 7, 7, 5, 5]));
    expect(ours).toEqual(torch);
    // Node 3 is cpus 12-15 and 44-47; its two GPUs get two cores each.
    expect(lists('node')[0]).toEqual([12, 13, 14, 15, 44, 45, 46, 47]);
    expect(lists('exclusive').slice(0, 2)).toEqual([[12, 13, 44, 45], [14, 15, 46, 47]]);
    // Socket 0 is nodes 0-3: cpus 0-15 and 32-47.
    expect(lists('socket')[0]).toEqual([...range(0, 15), ...range(32, 47)]);
  });

  it('uneven shares, a GPU without a node (-1: node 0), fewer ranks than GPUs, a narrowed launcher', () => {
    const host = x86(1, 2, 7, [0, 1, 0]);
    host.gpus.push(['0000:c1:00.0', -1]);
    const all = both('uneven', host, { nproc: 3 });
    expect(all.ours).toEqual(all.torch);
    // Node 0's 7 cores among its three GPUs (0, 2 and the one without a node): 3, 2, 2.
    expect(all.lists('exclusive').map((l) => l.length)).toEqual([6, 14, 4]);
    // The launcher kept off cpu 0 and its sibling: node 0 has 6 cores left, 2 a GPU.
    const narrowed = both('uneven-narrowed', host, { nproc: 3, allowed: [...range(1, 13), ...range(15, 27)] });
    expect(narrowed.ours).toEqual(narrowed.torch);
    expect(narrowed.lists('exclusive')[0]).toEqual([1, 2, 15, 16]);
  });

  it('core complexes: 2 nodes of 8 cores in complexes of 4, more GPUs on a node than complexes, a narrowed launcher', () => {
    const host = x86(1, 2, 8, [0, 0, 0, 1, 0], 4);
    const all = both('complexes', host);
    expect(all.ours).toEqual(all.torch);
    // Node 0's complexes: cpus 0-3 and 16-19, then 4-7 and 20-23; its four GPUs (0, 1, 2, 4) take them in turn.
    const [a, b] = [[0, 1, 2, 3, 16, 17, 18, 19], [4, 5, 6, 7, 20, 21, 22, 23]];
    expect(all.lists('core-complex')).toEqual([a, b, a, [8, 9, 10, 11, 24, 25, 26, 27], b]);
    // Without cpus 0-1 and 16-17 the first complex is the smaller one: the full one comes first.
    const narrowed = both('complexes-narrowed', host, { allowed: [...range(2, 15), ...range(18, 31)] });
    expect(narrowed.ours).toEqual(narrowed.torch);
    expect(narrowed.lists('core-complex')[0]).toEqual(b);
  });

  it('refuses a GPU whose node has none of the launcher\'s CPUs, where torch would bind to nothing', () => {
    const host = x86(2, 1, 4, [0, 1]);
    const { torch, ours } = both('off-node', host, { allowed: [...range(0, 3), ...range(8, 11)], modes: ['node'] });
    expect(torch['node']).toEqual([[0, 1, 2, 3, 8, 9, 10, 11], []]);
    expect((ours['node'] as { error: string }).error).toMatch(/GPU 1 \(0000:29:00.0\) is on NUMA node 1, and none of that node's CPUs is among the launcher's \(0-3,8-11\)/);
  });

  it('refuses more ranks than GPUs and an unreadable numa_node, naming them', () => {
    const host = x86(1, 1, 2, [0]);
    const sys = writeSysfs('one-gpu', host);
    const places = cpuPlaces(range(0, 3), path.join(sys, 'devices', 'system'));
    expect(() => numaCpus('node', [host.gpus[0]![0]], 2, places, sys)).toThrow(/2 ranks a node, but 1 GPU visible/);
    expect(() => numaCpus('node', ['0000:99:00.0'], 1, places, sys)).toThrow(/cannot read .*0000:99:00.0\/numa_node/);
  });
});

describe('resolveOptions', () => {
  const script = path.join(ROOT, FIXTURE);
  it('takes one of cpuBind and numaBinding, and names the modes', () => {
    const gpuPciBusIds = ['0000:18:00.0'];
    const codeOf = (f: () => unknown): unknown => {
      try {
        f();
      } catch (err) {
        return isNcclNodeError(err) ? err.code : err;
      }
      return undefined;
    };
    expect(codeOf(() => resolveOptions({ script, nprocPerNode: 1, cpuBind: 'exclusive', numaBinding: 'node', gpuPciBusIds }))).toBe('ERR_INVALID_ARGUMENT');
    expect(() => resolveOptions({ script, nprocPerNode: 1, numaBinding: 'nodes' as never, gpuPciBusIds })).toThrow(/node, socket, exclusive.*"nodes"/);
  });
});

interface Report { rank: number; localRank: number; told: string | null; process: string; threads: string[] }

function run(args: string[], env: Record<string, string | undefined>): { code: number | null; reports: Report[]; stderr: string } {
  const r = spawnSync(process.execPath, [BIN, 'run', ...args], { cwd: ROOT, env: { ...process.env, NCCL_NODE_TOKEN: undefined, ...env }, encoding: 'utf8', timeout: 60_000 });
  const reports = r.stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Report);
  return { code: r.status, reports: reports.sort((a, b) => a.rank - b.rank), stderr: r.stderr };
}

const mine = parseCpuList(/^Cpus_allowed_list:\s*(.*)$/m.exec(readFileSync('/proc/self/status', 'utf8'))![1]!);

describe('nccl-node run --numa-binding', () => {
  // This machine's CPUs as two NUMA nodes (its first half and the rest), the stand-in
  // driver's GPU 0 on the second and GPU 1 on the first: the bindings cross rank order.
  const half = Math.ceil(mine.length / 2);
  const first = mine.slice(0, half);
  const second = mine.length > 1 ? mine.slice(half) : first;
  const sysfs = writeSysfs('this-host', {
    nodes: [{ pkg: 0, cores: first.map((c) => [c]) }, { pkg: 0, cores: second.map((c) => [c]) }],
    gpus: [['0000:18:00.0', 1], ['0000:19:00.0', 0]],  // the stand-in's addresses (bus 0x18 + index)
  });
  const env = { ...standinEnv(), CUDA_STANDIN_DEVICES: '2', NCCL_NODE_SYSFS: sysfs };

  it('binds every thread of local rank i to the node of GPU i', () => {
    const { code, reports, stderr } = run(['--nproc-per-node', '2', '--numa-binding', 'node', FIXTURE], env);
    expect(code, stderr).toBe(0);
    expect(reports.map((r) => r.told)).toEqual([formatCpuList(second), formatCpuList(first)]);
    for (const r of reports) {
      expect(r.process).toBe(r.told);
      expect(r.threads.length).toBeGreaterThan(1);
      for (const t of r.threads) expect(t).toBe(r.told);
    }
  });

  it('takes torchrun\'s underscore spelling', () => {
    const { code, reports, stderr } = run(['--nproc_per_node=2', '--numa_binding=exclusive', FIXTURE], env);
    expect(code, stderr).toBe(0);
    expect(reports.map((r) => r.process)).toEqual([formatCpuList(second), formatCpuList(first)]);
  });

  it('fails with what is missing: the driver, a GPU for each rank, the node file; refuses bad flags', () => {
    const noDriver = run(['--nproc-per-node', '2', '--numa-binding', 'node', FIXTURE], { ...env, NCCL_NODE_LIBCUDA: '/nonexistent/libcuda.so.1' });
    expect(noDriver.code).toBe(1);
    expect(noDriver.stderr).toMatch(/\[ERR_UNAVAILABLE\].*CUDA driver.*NCCL_NODE_LIBCUDA/);
    const tooMany = run(['--nproc-per-node', '3', '--numa-binding', 'node', FIXTURE], env);
    expect(tooMany.code).toBe(2);
    expect(tooMany.stderr).toMatch(/3 ranks a node, but 2 GPUs visible/);
    const noNode = run(['--nproc-per-node', '2', '--numa-binding', 'socket', FIXTURE], { ...env, NCCL_NODE_SYSFS: path.join(scratch, 'empty') });
    expect(noNode.code).toBe(1);
    expect(noNode.stderr).toMatch(/\[ERR_UNAVAILABLE\].*cannot read .*0000:18:00.0\/numa_node/);
    const twoWays = run(['--nproc-per-node', '2', '--numa-binding', 'node', '--cpu-bind', 'exclusive', FIXTURE], env);
    expect(twoWays.code).toBe(2);
    expect(twoWays.stderr).toMatch(/give one/);
    const badMode = run(['--nproc-per-node', '2', '--numa-binding', 'core', FIXTURE], env);
    expect(badMode.code).toBe(2);
    expect(badMode.stderr).toMatch(/expected node, socket, exclusive/);
  });
});
