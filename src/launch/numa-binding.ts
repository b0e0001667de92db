/**
 * GPU-aware CPU binding (`nccl-node run --numa-binding`), torchrun's modes and meaning:
 * local rank i drives GPU i (CUDA's order in the launcher: CUDA_VISIBLE_DEVICES,
 * CUDA_DEVICE_ORDER) and runs on CPUs of the NUMA node that GPU hangs off, so its
 * staging copies, pinned buffers and the proxy threads feeding the NIC next to it stay on
 * local memory. `--cpu-bind exclusive` (cpu-bind.ts) splits the CPUs in rank order and
 * knows nothing of GPUs: right where GPU i sits on the i-th share of the nodes, wrong on
 * hosts whose GPU order interleaves nodes (GPUs 0-1 on node 3, 2-3 on node 1, ...).
 *
 * - `node`: every CPU of the GPU's NUMA node the launcher may use.
 * - `socket`: every such CPU of the package (socket) the GPU's node is on.
 * - `exclusive`: the GPU's node split among the GPUs on that node, whole cores in order,
 *   the lower GPU indices taking one more core where they do not divide evenly.
 * - `core-complex`: one core complex of the GPU's node (the CPUs sharing a last-level
 *   cache: an AMD CCD, ...), the GPUs on the node taking the complexes in turn, those
 *   with the most usable CPUs first; GPUs outnumbering complexes share them.
 *
 * Where a GPU sits comes from the driver (the PCI address, gpuInfo()) and sysfs
 * (`bus/pci/devices/<address>/numa_node`); a node of -1, which one-node hosts and many
 * VMs report, counts as node 0, as torch counts it. The sysfs root is NCCL_NODE_SYSFS
 * (default /sys), for containers that mount the host's sysfs elsewhere.
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

import { NcclNodeError } from '../errors.js';
import { allowedCpus, checkMode, cpuPlaces, exclusiveCpus, findTaskset, formatCpuList, parseCpuList, sysfsRoot, type CpuPlace } from './cpu-bind.js';

export const NUMA_BINDING_MODES = ['node', 'socket', 'exclusive', 'core-complex'] as const;
export type NumaBindingMode = (typeof NUMA_BINDING_MODES)[number];

export function checkNumaBindingMode(v: string): NumaBindingMode {
  return checkMode('numaBinding', NUMA_BINDING_MODES, v);
}

/** The NUMA node sysfs gives the PCI device at `pciBusId` ("0000:3b:00.0"); -1 counts as 0. */
export function pciNumaNode(pciBusId: string, sysfs: string): number {
  const file = path.join(sysfs, 'bus', 'pci', 'devices', pciBusId.toLowerCase(), 'numa_node');
  let text: string;
  try {
    text = readFileSync(file, 'utf8').trim();
  } catch {
    throw new NcclNodeError('ERR_UNAVAILABLE', `--numa-binding: cannot read ${file} (the NUMA node of the GPU at ${pciBusId})`,
      { option: 'numaBinding', missing: file });
  }
  if (!/^-?\d+$/.test(text)) {
    throw new NcclNodeError('ERR_UNAVAILABLE', `--numa-binding: ${file} holds ${JSON.stringify(text)}, not a node number`, { option: 'numaBinding', received: text });
  }
  return Math.max(Number(text), 0);
}

/**
 * Per local rank of `nproc`, the CPUs `mode` binds it to. `gpus`: every visible GPU's PCI
 * address in CUDA's order (rank i drives gpus[i]); `places`: the CPUs the launcher may use.
 */
export function numaCpus(mode: NumaBindingMode, gpus: readonly string[], nproc: number, places: readonly CpuPlace[], sysfs: string): number[][] {
  if (nproc > gpus.length) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT',
      `--numa-binding binds local rank i to the NUMA node of GPU i: ${nproc} ranks a node, but ${gpus.length} GPU${gpus.length === 1 ? '' : 's'} visible here`,
      { option: 'numaBinding', expected: `at most ${gpus.length} ranks a node`, received: nproc });
  }
  const nodes = gpus.map((g) => pciNumaNode(g, sysfs));
  const onNode = (node: number): CpuPlace[] => places.filter((p) => p.node === node);
  // A node's package: the package of its lowest CPU the launcher may use.
  const packageOf = (node: number): number | undefined => onNode(node).sort((a, b) => a.cpu - b.cpu)[0]?.pkg;
  // Every visible GPU on GPU i's node, in index order.
  const sharingNode = (i: number): number[] => nodes.flatMap((n, g) => (n === nodes[i] ? [g] : []));
  // A node's core complexes, read from sysfs once for all the ranks on it.
  const complexes = new Map<number, number[][]>();
  const complexesOf = (node: number): number[][] => {
    let c = complexes.get(node);
    if (!c) complexes.set(node, (c = coreComplexes(onNode(node).map((p) => p.cpu), sysfs)));
    return c;
  };
  const cpus = (i: number): number[] => {
    const node = nodes[i]!;
    switch (mode) {
      case 'node':
        return onNode(node).map((p) => p.cpu);
      case 'socket': {
        const pkg = packageOf(node);
        const nodesThere = new Set([...new Set(places.map((p) => p.node))].filter((n) => packageOf(n) === pkg));
        return pkg === undefined ? [] : places.filter((p) => nodesThere.has(p.node)).map((p) => p.cpu);
      }
      case 'exclusive': {
        const mine = onNode(node);
        const sharing = sharingNode(i);
        return mine.length === 0 ? [] : exclusiveCpus(mine, sharing.length)[sharing.indexOf(i)]!;
      }
      case 'core-complex': {
        const complexes = complexesOf(node);
        return complexes.length === 0 ? [] : complexes[sharingNode(i).indexOf(i) % complexes.length]!;
      }
    }
  };
  return Array.from({ length: nproc }, (_, i) => {
    const list = [...cpus(i)].sort((a, b) => a - b);
    if (list.length === 0) {
      throw new NcclNodeError('ERR_UNAVAILABLE',
        `--numa-binding ${mode}: GPU ${i} (${gpus[i]}) is on NUMA node ${nodes[i]}, and none of that node's CPUs is among the launcher's (${formatCpuList(places.map((p) => p.cpu))})`,
        { option: 'numaBinding', gpu: i, node: nodes[i] });
    }
    return list;
  });
}

/**
 * `cpus` grouped by the last-level cache they share (each CPU's highest-level data or
 * unified cache, sysfs `cpu/cpuN/cache/index*`), the groups with the most of `cpus` first.
 * A CPU whose caches sysfs does not list joins the group of all such CPUs.
 */
export function coreComplexes(cpus: readonly number[], sysfs: string): number[][] {
  const groups = new Map<number, number[]>();
  for (const cpu of cpus) {
    const shared = lastLevelCache(cpu, sysfs);
    const key = shared.length > 0 ? Math.min(...shared) : -1;
    const group = groups.get(key);
    if (group) group.push(cpu);
    else groups.set(key, [cpu]);
  }
  // Ties go to the complex whose lowest CPU (usable or not) is lower, as torch orders them.
  return [...groups.entries()]
    .sort(([ka, a], [kb, b]) => b.length - a.length || ka - kb)
    .map(([, g]) => g.sort((a, b) => a - b));
}

/** The CPUs sharing `cpu`'s highest-level data or unified cache; [] where sysfs lists none. */
function lastLevelCache(cpu: number, sysfs: string): number[] {
  const dir = path.join(sysfs, 'devices', 'system', 'cpu', `cpu${cpu}`, 'cache');
  let best = -1;
  let shared: number[] = [];
  let entries: string[];
  try {
    entries = readdirSync(dir);
  } catch {
    return [];
  }
  for (const entry of entries) {
    if (!/^index\d+$/.test(entry)) continue;
    const read = (f: string): string | undefined => {
      try {
        return readFileSync(path.join(dir, entry, f), 'utf8').trim();
      } catch {
        return undefined;
      }
    };
    const type = read('type');
    const level = Number(read('level'));
    const list = read('shared_cpu_list');
    if ((type !== 'Unified' && type !== 'Data') || !Number.isInteger(level) || level <= best || list === undefined) continue;
    best = level;
    shared = parseCpuList(list);
  }
  return shared;
}

/**
 * `--numa-binding` on this host: the taskset that applies it and, per local rank, its CPU
 * list. `gpus` as numaCpus takes them (the launcher passes gpuInfo()'s).
 */
export function numaBinding(mode: NumaBindingMode, gpus: readonly string[], nproc: number, env: NodeJS.ProcessEnv): { taskset: string; cpus: string[] } {
  const sysfs = sysfsRoot(env);
  const taskset = findTaskset(env);
  const places = cpuPlaces(allowedCpus(), path.join(sysfs, 'devices', 'system'));
  return { taskset, cpus: numaCpus(mode, gpus, nproc, places, sysfs).map(formatCpuList) };
}
