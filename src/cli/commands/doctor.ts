/**
 * `nccl-node doctor`: is this machine ready for GPU training? Finds libcuda,
 * libnccl and libnvidia-ml by file (src/gpu/detect.ts, nothing loaded here), then
 * loads them in a child process (doctor-probe.ts) with a deadline, and prints
 * versions, devices, NVML health and a verdict, as node-llama-cpp's `inspect gpu`.
 *
 * Exit codes: 0 ready (warnings allowed), 1 not ready (a library missing or
 * failing, no GPU, or a GPU with problems), 2 bad usage.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { InvalidArgumentError, type Command } from 'commander';

import { probeLibrary, LIBRARY_ENV, type GpuLibrary } from '../../gpu/detect.js';
import type { HealthReport } from '../../gpu/health.js';
import type { GpuInfo } from '../../native/contract.js';

interface ProbeResult {
  info?: GpuInfo;
  infoError?: { code?: string; message: string };
  health?: HealthReport;
  healthError?: { code?: string; message: string };
  /** Set by the parent when the child crashed, hung or printed nothing. */
  childError?: string;
}

export interface DoctorReport {
  libraries: Record<GpuLibrary, string | null>;
  probe: ProbeResult;
  verdict: 'ready' | 'not ready';
  problems: string[];
  warnings: string[];
}

/** The probe as a child process: same node, tsx when running from sources, bounded by timeoutMs. */
function runProbe(timeoutMs: number): Promise<ProbeResult> {
  const self = fileURLToPath(import.meta.url);
  const child = self.replace(/doctor\.(ts|js)$/, 'doctor-probe.$1');
  const args = child.endsWith('.ts') ? ['--import', import.meta.resolve('tsx'), child] : [child];
  return new Promise((resolve) => {
    if (!existsSync(child)) return resolve({ childError: `probe script ${child} is missing` });
    const p = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'], env: process.env });
    let out = '', err = '';
    p.stdout.on('data', (d: Buffer) => { out += d.toString(); });
    p.stderr.on('data', (d: Buffer) => { err += d.toString(); });
    let timedOut = false;
    const timer = setTimeout(() => { timedOut = true; p.kill('SIGKILL'); }, timeoutMs);
    p.on('exit', (code, signal) => {
      clearTimeout(timer);
      const line = out.split('\n').find((l) => l.startsWith('PROBE '));
      if (line) return resolve(JSON.parse(line.slice(6)) as ProbeResult);
      const why = timedOut ? `did not finish within ${timeoutMs} ms (a library hangs while loading)`
        : `exited with ${signal ?? `code ${code}`} before reporting`;
      resolve({ childError: `loading the GPU libraries ${why}${err.trim() ? `: ${err.trim().split('\n').slice(-3).join(' | ')}` : ''}` });
    });
  });
}

export async function doctor(timeoutMs: number, env: NodeJS.ProcessEnv = process.env): Promise<DoctorReport> {
  const libs = (['cuda', 'nccl', 'nvml'] as GpuLibrary[]).map((l) => probeLibrary(l, env));
  const libraries = Object.fromEntries(libs.map((p) => [p.library, p.path ?? null])) as Record<GpuLibrary, string | null>;
  const problems: string[] = [], warnings: string[] = [];
  for (const p of libs) {
    if (p.path) continue;
    const msg = `${p.library} library not found (set ${LIBRARY_ENV[p.library]}; searched ${p.searched.length} places)`;
    (p.library === 'nvml' ? warnings : problems).push(msg);
  }
  const probe = await runProbe(timeoutMs);
  if (probe.childError) problems.push(probe.childError);
  if (probe.infoError) problems.push(`the addon could not be loaded: ${probe.infoError.message.split('\n')[0]}`);
  const info = probe.info;
  if (info) {
    if (!info.cuda) problems.push(`CUDA: ${info.cudaError}`);
    else if (info.devices === 0) problems.push('CUDA reports no devices');
    if (!info.nccl) problems.push(`NCCL: ${info.ncclError}`);
  }
  if (probe.healthError) warnings.push(`NVML health unavailable: ${probe.healthError.message}`);
  for (const d of probe.health?.devices ?? []) {
    for (const p of d.problems) problems.push(`GPU ${d.index}: ${p}`);
  }
  return { libraries, probe, verdict: problems.length ? 'not ready' : 'ready', problems, warnings };
}

function mib(bytes: number): string { return `${Math.round(bytes / 2 ** 20)} MiB`; }
const orNa = (v: unknown, unit = '') => (v === null || v === undefined ? 'n/a' : `${v}${unit}`);

export function renderReport(r: DoctorReport, write: (line: string) => void): void {
  write('Libraries (found by file, loaded in a child process):');
  for (const [lib, path] of Object.entries(r.libraries)) write(`  ${lib.padEnd(5)} ${path ?? 'not found'}`);
  const info = r.probe.info, h = r.probe.health;
  write('Versions:');
  const cuda = info?.cuda ? `${Math.floor(info.driverVersion / 1000)}.${(info.driverVersion % 1000) / 10}` : 'not loaded';
  write(`  CUDA driver API  ${cuda}`);
  write(`  NCCL             ${info?.nccl ? info.ncclVersion : 'not loaded'}`);
  const features = Object.entries(info?.ncclFeatures ?? {});
  if (features.length) {
    const absent = features.filter(([, on]) => !on).map(([f]) => f);
    write(`  NCCL features    ${features.filter(([, on]) => on).map(([f]) => f).join(' ') || 'none'}` +
      `${absent.length ? ` (absent: ${absent.join(' ')})` : ''}`);
  }
  write(`  NVIDIA driver    ${h?.driverVersion ?? 'n/a'} (NVML ${h?.nvmlVersion ?? 'n/a'})`);
  write(`Devices: ${info?.devices ?? 0} (CUDA)${h ? `, ${h.devices.length} (NVML)` : ''}`);
  for (const d of h?.devices ?? []) {
    if (d.error) { write(`  GPU ${d.index}: ${d.error}`); continue; }
    const mem = d.memory ? `${mib(d.memory.used)} / ${mib(d.memory.total)}` : 'n/a';
    const ecc = d.ecc ? `${orNa(d.ecc.volatile.corrected)}/${orNa(d.ecc.volatile.uncorrected)}` : 'n/a';
    const links = d.nvlinks ? `${d.nvlinks.filter((l) => l.active).length}/${d.nvlinks.length}` : 'n/a';
    write(`  GPU ${d.index}: ${d.name ?? '?'} ${d.pciBusId ?? ''}  ${orNa(d.temperatureC, ' C')}  ` +
      `${d.powerMilliwatts === null ? 'n/a' : `${(d.powerMilliwatts / 1000).toFixed(0)} W`}  mem ${mem}  ` +
      `util ${orNa(d.utilization?.gpu, '%')}  ECC corr/uncorr ${ecc}  NVLink ${links}  PCIe replays ${orNa(d.pcieReplayCount)}` +
      `${d.fabric ? `  fabric ${d.fabric.state}/${d.fabric.healthSummary}` : ''}`);
    for (const p of d.problems) write(`    ! ${p}`);
  }
  for (const w of r.warnings) write(`warning: ${w}`);
  for (const p of r.problems) write(`problem: ${p}`);
  write(r.verdict === 'ready'
    ? `Verdict: ready: NCCL ${info?.ncclVersion} on ${info?.devices} GPUs${h ? ', all healthy' : ' (health unknown)'}`
    : `Verdict: not ready (${r.problems.length} problem${r.problems.length === 1 ? '' : 's'})`);
}

function ms(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError('expected a positive number of milliseconds');
  return n;
}

export function registerDoctorCommand(program: Command): void {
  program
    .command('doctor')
    .description('check the GPU libraries, devices and NVML health; exit 0 when ready for NCCL training')
    .option('--json', 'print the report as JSON')
    .option('--timeout <ms>', 'deadline for loading the libraries in the child process', ms, 30000)
    .action(async (opts: { json?: boolean; timeout: number }) => {
      const report = await doctor(opts.timeout);
      if (opts.json) process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
      else renderReport(report, (l) => process.stdout.write(`${l}\n`));
      process.exitCode = report.verdict === 'ready' ? 0 : 1;
    });
}
