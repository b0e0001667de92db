/**
 * CPU binding of a node's ranks (`nccl-node run --cpu-bind`), as mpirun's
 * `--bind-to core` does: each local rank runs on
 * its own share of the CPUs the launcher may use, so the scheduler does not move a
 * rank's communicator thread between cores, or put two ranks' busy threads on one core
 * while another idles. Ranks start under `taskset -c` (util-linux), so every thread of
 * the process (V8's, libuv's, the addon's) is bound from its first instruction; Node
 * has no call to set affinity.
 *
 * `exclusive`: the allowed CPUs grouped by physical core (hyperthread siblings stay
 * together), ordered by NUMA node, package and core, then cut into `nproc` contiguous
 * runs of whole cores as equal as they come: with 2 NUMA nodes of 8 cores and 2 ranks,
 * one node each. With fewer cores than ranks, cores are split into their hyperthreads;
 * with fewer CPUs than ranks, neighbouring ranks share a CPU (rank i on CPU
 * floor(i * cpus / nproc)). Spare workers (`--spares`) stay unbound: one may take any
 * rank's place. The topology comes from sysfs under NCCL_NODE_SYSFS (default /sys).
 * numa-binding.ts binds by where each rank's GPU sits instead.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';

import { NcclNodeError } from '../errors.js';

export const CPU_BIND_MODES = ['none', 'exclusive'] as const;
export type CpuBindMode = (typeof CPU_BIND_MODES)[number];

/** What a rank is told it was bound to (a CPU list as taskset and /proc print it). */
export const CPUS_ENV = 'NCCL_NODE_CPUS';

/** Where the launcher reads sysfs (default /sys), for containers that mount the host's elsewhere. */
export const SYSFS_ENV = 'NCCL_NODE_SYSFS';

export function sysfsRoot(env: NodeJS.ProcessEnv): string {
  return env[SYSFS_ENV] || '/sys';
}

export function checkCpuBindMode(v: string): CpuBindMode {
  return checkMode('cpuBind', CPU_BIND_MODES, v);
}

/** `v` if it is one of `modes`, else ERR_INVALID_ARGUMENT naming `option` and the choices (numa-binding.ts too). */
export function checkMode<M extends string>(option: string, modes: readonly M[], v: string): M {
  if (!(modes as readonly string[]).includes(v)) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `${option} must be one of ${modes.join(', ')}, got ${JSON.stringify(v)}`,
      { option, expected: [...modes], received: v });
  }
  return v as M;
}

/** "0-3,8,10-11" -> [0, 1, 2, 3, 8, 10, 11] (the kernel's list format). */
export function parseCpuList(text: string): number[] {
  const out: number[] = [];
  for (const part of text.trim().split(',')) {
    if (part === '') continue;
    const m = /^(\d+)(?:-(\d+))?$/.exec(part);
    if (!m) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `not a CPU list: ${JSON.stringify(text)}`, { received: text });
    const lo = Number(m[1]);
    const hi = m[2] === undefined ? lo : Number(m[2]);
    for (let c = lo; c <= hi; c++) out.push(c);
  }
  return [...new Set(out)].sort((a, b) => a - b);
}

/** [0, 1, 2, 3, 8] -> "0-3,8". */
export function formatCpuList(cpus: readonly number[]): string {
  const sorted = [...new Set(cpus)].sort((a, b) => a - b);
  const runs: string[] = [];
  for (let i = 0; i < sorted.length;) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j]! + 1) j++;
    runs.push(i === j ? `${sorted[i]}` : `${sorted[i]}-${sorted[j]}`);
    i = j + 1;
  }
  return runs.join(',');
}

/** Where a logical CPU sits: its NUMA node, package and physical core. */
export interface CpuPlace { cpu: number; node: number; pkg: number; core: number }

/** The CPUs this process may run on (its affinity mask, as /proc reports it). */
export function allowedCpus(): number[] {
  const status = readFileSync('/proc/self/status', 'utf8');
  const line = /^Cpus_allowed_list:\s*(.*)$/m.exec(status);
  if (!line) throw new NcclNodeError('ERR_UNAVAILABLE', 'cannot read this process\'s CPU affinity from /proc/self/status');
  return parseCpuList(line[1]!);
}

/** The topology of `cpus` from sysfs; a missing file counts as node, package or core 0 / the CPU itself. */
export function cpuPlaces(cpus: readonly number[], sysfs = '/sys/devices/system'): CpuPlace[] {
  const nodeOf = new Map<number, number>();
  const nodes = path.join(sysfs, 'node');
  if (existsSync(nodes)) {
    for (const name of readdirNames(nodes)) {
      const m = /^node(\d+)$/.exec(name);
      if (!m) continue;
      const list = readText(path.join(nodes, name, 'cpulist'));
      if (list !== undefined) for (const c of parseCpuList(list)) nodeOf.set(c, Number(m[1]));
    }
  }
  return cpus.map((cpu) => {
    const topo = path.join(sysfs, 'cpu', `cpu${cpu}`, 'topology');
    const num = (file: string, dflt: number): number => {
      const t = readText(path.join(topo, file));
      return t === undefined || !/^-?\d+$/.test(t) ? dflt : Number(t);
    };
    return { cpu, node: nodeOf.get(cpu) ?? 0, pkg: num('physical_package_id', 0), core: num('core_id', cpu) };
  });
}

/** Per local rank, the CPUs `exclusive` binds it to (see the file's comment). */
export function exclusiveCpus(places: readonly CpuPlace[], nproc: number): number[][] {
  if (places.length === 0) throw new NcclNodeError('ERR_UNAVAILABLE', 'no CPUs to bind ranks to');
  // Whole cores, in NUMA node, package, core order; a core's hyperthreads together.
  const byCore = new Map<string, number[]>();
  for (const p of [...places].sort((a, b) => a.node - b.node || a.pkg - b.pkg || a.core - b.core || a.cpu - b.cpu)) {
    const key = `${p.node}/${p.pkg}/${p.core}`;
    const core = byCore.get(key);
    if (core) core.push(p.cpu);
    else byCore.set(key, [p.cpu]);
  }
  let units: number[][] = [...byCore.values()];
  if (units.length < nproc) units = units.flat().map((c) => [c]);  // fewer cores than ranks: hyperthreads apart
  if (units.length < nproc) {
    // Fewer CPUs than ranks: neighbouring ranks share one.
    return Array.from({ length: nproc }, (_, i) => units[Math.floor((i * units.length) / nproc)]!);
  }
  // Contiguous runs of whole units; the first (units % nproc) ranks get one more.
  const base = Math.floor(units.length / nproc);
  const extra = units.length % nproc;
  const out: number[][] = [];
  let at = 0;
  for (let i = 0; i < nproc; i++) {
    const n = base + (i < extra ? 1 : 0);
    out.push(units.slice(at, at + n).flat().sort((a, b) => a - b));
    at += n;
  }
  return out;
}

/**
 * `exclusive` on this host: the taskset that applies it and, per local rank of `nproc`,
 * its CPU list as taskset takes it (the launcher's ranks, and bench/comm/sweep.ts --cpu-bind).
 */
export function exclusiveBinding(nproc: number, env: NodeJS.ProcessEnv): { taskset: string; cpus: string[] } {
  const system = path.join(sysfsRoot(env), 'devices', 'system');
  return { taskset: findTaskset(env), cpus: exclusiveCpus(cpuPlaces(allowedCpus(), system), nproc).map(formatCpuList) };
}

/** The taskset binary on PATH, or an error naming what is missing. */
export function findTaskset(env: NodeJS.ProcessEnv): string {
  for (const dir of (env['PATH'] ?? '/usr/bin:/bin').split(':')) {
    const p = path.join(dir || '.', 'taskset');
    if (existsSync(p)) return p;
  }
  throw new NcclNodeError('ERR_UNAVAILABLE', '--cpu-bind starts ranks under taskset, which is not on PATH: install util-linux, or leave out --cpu-bind',
    { option: 'cpuBind', missing: 'taskset' });
}

function readText(file: string): string | undefined {
  try {
    return readFileSync(file, 'utf8').trim();
  } catch {
    return undefined;
  }
}

function readdirNames(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}
