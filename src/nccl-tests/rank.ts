/**
 * One rank of `nccl-node bench`: joins the job found in the environment (nccl-node
 * run, --nproc-per-node, torchrun, Slurm, mpirun, or a single process), runs the
 * collective's sweep and, on rank 0, prints the nccl-tests report and writes -J/--csv.
 * Resolves to the exit code: 0, 7 (wrong results or NCCL_TESTS_MIN_BW missed),
 * 3 (backend error), 4 (timeout), 6 (invalid usage).
 */
import { readFileSync } from 'node:fs';
import os from 'node:os';
import type { Communicator } from '../comm/communicator.js';
import { init } from '../comm/init.js';
import { isNcclNodeError } from '../errors.js';
import type { Collective } from './collective.js';
import { resolveConfig, UsageError } from './config.js';
import { firstDevice, splitColor, splitGroup } from './split.js';
import { deviceOverride } from '../gpu/current-device.js';
import { gpuInfo } from '../gpu/info.js';
import { runCollective, type BenchEnv, type Control, type RunTotals } from './driver.js';
import type { BenchFlags } from './flags.js';
import { footerLines, headerLines, NCCL_TESTS_VERSION, tableHeader, type RankLine } from './text-format.js';
import { createGpuDevice, gpuControl } from './gpu-device.js';
import { hostDevice } from './host-device.js';
import { buildCsv, buildJson, openExclusive, writeCsv, writeJson, type ReportMeta } from './result-files.js';

export const EXIT = { ok: 0, internal: 1, backend: 3, timeout: 4, notImplemented: 5, usage: 6, results: 7 } as const;

/** Set to a rank number to flip one element of that rank's results before checking (tests). */
export const CORRUPT_ENV = 'NCCL_NODE_BENCH_CORRUPT';

function packageVersion(): string {
  try {
    return (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

/** Host-side exchanges over the communicator itself (Gloo); the NCCL path would use its Gloo side channel. */
function commControl(comm: Communicator): Control {
  return {
    size: comm.size,
    rank: comm.rank,
    async allReduce(values, op) {
      const buf = Float64Array.from(values);
      await comm.allReduce(buf, { op });
      return [...buf];
    },
    fromRank0: (values) => comm.broadcastObject(values, { root: 0 }),
    barrier: async () => void (await comm.barrier()),
  };
}

/** World rank, group color (NCCL_TESTS_SPLIT) and device, as nccl-tests' device report. */
function myRankLine(world: Communicator, group: number): RankLine {
  const cpu = os.cpus()[0]?.model.trim().replace(/\s+/g, ' ') ?? 'unknown CPU';
  // Gloo ranks have no GPU: device -1, no PCI address. NCCL ranks: LOCAL_RANK or NCCL_TESTS_DEVICE,
  // with the driver's name and PCI address for it, as nccl-tests prints them.
  const device = deviceOverride() ?? world.localRank;
  if (world.backend === 'nccl') {
    const gpu = gpuInfo().gpus[device];
    const pci = /^([0-9a-f]+):([0-9a-f]+):([0-9a-f]+)/i.exec(gpu?.pciBusId ?? '');
    return {
      rank: world.rank, group, pid: process.pid, host: os.hostname(), device,
      pci: pci ? [parseInt(pci[1]!, 16), parseInt(pci[2]!, 16), parseInt(pci[3]!, 16)] : [0, 0, 0],
      name: gpu?.name ?? `CUDA device ${device}`,
    };
  }
  return { rank: world.rank, group, pid: process.pid, host: os.hostname(), device: -1, pci: [0, 0, 0], name: `CPU ${cpu}` };
}

/** Every rank's line, in rank order (MPI_Gather of the device lines in nccl-tests). */
async function gatherRankLines(comm: Communicator, mine: RankLine): Promise<RankLine[]> {
  return comm.allGatherObject(mine);
}

function versionLine(comm: Communicator): string {
  const v = comm.backendVersion.replace(/^\S+\s+/, '');
  const lib = comm.backend === 'nccl' ? `nccl-library=${v}` : `gloo-library=${v}`;
  return `# nccl-node version ${packageVersion()} nccl-tests-format ${NCCL_TESTS_VERSION} backend=${comm.backend} ${lib}`;
}

export async function benchRank(coll: Collective, flags: BenchFlags, args: string[]): Promise<number> {
  const startTime = new Date();
  const out = (line: string) => process.stdout.write(`${line}\n`);
  const gpu0 = firstDevice(process.env);
  if (gpu0 !== undefined) {
    const problem = badFirstDevice(gpu0, flags.backend);
    if (problem) {
      process.stderr.write(problem);
      return EXIT.notImplemented;
    }
    // The NCCL communicator and every device buffer of this process use it.
    process.env.NCCL_NODE_DEVICE = String(gpu0);
  }
  let comm: Communicator | undefined;
  try {
    comm = await init({
      backend: flags.backend,
      checkCollectives: flags.checkCollectives,
      ...(flags.timeout > 0 ? { timeoutMs: flags.timeout * 1000 } : {}),
    });
  } catch (err) {
    process.stderr.write(`nccl-node bench: ${err instanceof Error ? err.message : String(err)}\n`);
    return isNcclNodeError(err, 'ERR_INVALID_ARGUMENT') ? EXIT.usage : EXIT.backend;
  }
  const world = comm;
  const main = world.rank === 0;
  const print = main ? out : () => {};
  const program = `${coll.name}_perf`;
  let group: Communicator | undefined;
  try {
    const cfg = resolveConfig(flags, world.backend);
    if (main) for (const w of cfg.warnings) process.stderr.write(`nccl-node bench: ${w}\n`);
    const gpu = world.backend === 'nccl';
    // Exchanges (times, error counts, barriers) span the world; the test runs in the group.
    const control = gpu ? gpuControl(world) : commControl(world);
    const color = splitColor(process.env, world.rank);
    group = await splitGroup(world, color, control, coll, cfg.flags.root);
    const json = main && cfg.flags.output_file ? openExclusive(cfg.flags.output_file) : undefined;
    if (main && cfg.flags.output_file) print(json ? `# Writing JSON output to ${json.path}` : `# skipping json output; ${cfg.flags.output_file} not accessible`);
    const ranks = await gatherRankLines(world, myRankLine(world, color));
    print(versionLine(world));
    for (const n of cfg.notices) print(n);
    for (const l of headerLines(program, { ...paramsOf(cfg.flags), timing: gpu ? 'CUDA event' : 'host completion' }, ranks)) print(l);
    for (const l of tableHeader(!!cfg.flags.report_cputime, !!cfg.flags.report_timestamps, !!cfg.flags.per_iter_timing)) print(l);

    const env: BenchEnv = {
      comm: group, dev: gpu ? createGpuDevice(main ? (why) => process.stderr.write(`nccl-node bench: ${why}\n`) : undefined) : hostDevice,
      control, rank: group.rank, nranks: group.size,
      corrupt: process.env[CORRUPT_ENV] !== undefined && Number(process.env[CORRUPT_ENV]) === world.rank, print,
    };
    const totals: RunTotals = await runCollective(env, cfg, coll);
    const [outOfBounds] = (await env.control.allReduce([totals.errors], 'sum')) as [number];
    const avgBusBw = totals.busBwSum / totals.busBwCount;
    const minRaw = process.env.NCCL_TESTS_MIN_BW;
    const minBw = minRaw !== undefined ? Number.parseFloat(minRaw) || 0 : undefined;
    for (const l of footerLines(program, outOfBounds, avgBusBw, minBw)) print(l);
    if (main) {
      const meta: ReportMeta = {
        program, args, startTime, backend: world.backend, backendVersion: world.backendVersion, ncclVersion: gpu ? ncclVersionCode(world.backendVersion) : 0,
        nodeVersion: process.version, packageVersion: packageVersion(), worldSize: world.size, ranks, checkCollectives: flags.checkCollectives,
      };
      const summary = { rows: totals.rows, outOfBounds, avgBusBw, minBw, errors: [] };
      if (json) writeJson(json.fd, buildJson(meta, cfg, summary));
      if (cfg.flags.csv) writeCsv(cfg.flags.csv, buildCsv(meta, summary));
    }
    // Rank 0 has printed everything before any rank exits (a launcher stops the gang on a non-zero exit).
    await env.control.barrier();
    if (group !== world) await group.destroy();
    await world.destroy();
    return outOfBounds || (minBw !== undefined && avgBusBw < minBw * 0.9) ? EXIT.results : EXIT.ok;
  } catch (err) {
    if (err instanceof UsageError) {
      if (main) process.stderr.write(`nccl-node bench: ${err.message}\n`);
      if (group && group !== comm) await group.destroy().catch(() => {});
      await comm.destroy().catch(() => {});
      return EXIT.usage;
    }
    if (isNcclNodeError(err, 'ERR_TIMEOUT')) {
      print(`${os.hostname()}: Test timeout (${flags.timeout}s)`);
      if (group !== comm) group?.abort();
      comm.abort();
      return EXIT.timeout;
    }
    process.stderr.write(`nccl-node bench: rank ${comm.rank}: ${err instanceof Error ? err.message : String(err)}\n`);
    if (group !== comm) group?.abort();
    comm.abort();
    return EXIT.backend;
  }
}

/**
 * nccl-tests' check of NCCL_TESTS_DEVICE against the visible GPUs (writeDeviceReport),
 * with its message; Gloo (no GPU) has nothing to check.
 */
function badFirstDevice(gpu0: number, backend: string): string | undefined {
  if (backend === 'gloo') return undefined;
  const info = gpuInfo();
  if (!info.cuda) return undefined;  // init says what is missing
  if (gpu0 >= 0 && gpu0 < info.devices) return undefined;
  return `Invalid number of GPUs: ${gpu0 + 1} requested but only ${info.devices} were found.\nPlease check the number of processes and GPUs per process.\n`;
}

/** "nccl 2.30.7" -> 23007 (NCCL_VERSION_CODE), as nccl-tests reports it. */
function ncclVersionCode(v: string): number {
  const m = /(\d+)\.(\d+)\.(\d+)/.exec(v);
  return m ? Number(m[1]) * 10000 + Number(m[2]) * 100 + Number(m[3]) : 0;
}

function paramsOf(f: BenchFlags) {
  return {
    nThreads: f.nthreads, nGpus: f.ngpus, minBytes: f.minbytes, maxBytes: f.maxbytes, stepBytes: f.stepbytes, stepFactor: f.stepfactor,
    warmupIters: f.warmup_iters, iters: f.iters, aggIters: f.agg_iters, check: f.check, graph: f.cudagraph, unalign: f.unalign,
    blocking: f.blocking, perIterTiming: f.per_iter_timing, perIterSkip: f.per_iter_skip,
  };
}
