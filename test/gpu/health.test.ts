// NVML health() and onXid() against the stand-in libnvidia-ml (native/standins/
// nvml_standin.cpp), one process per config since NVML initialises once.
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { assess, type GpuHealth, type HealthReport } from '../../src/gpu/health.js';
import { root, standinEnv, standins } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'nccl-node-nvml-'));

function config(name: string, value: unknown): string {
  const p = join(dir, `${name}.json`);
  writeFileSync(p, JSON.stringify(value));
  return p;
}

/** Runs test/gpu/health-worker.mts; resolves with its RESULT, exit code and run time. */
function worker(env: Record<string, string>, timeoutMs = 20000) {
  return new Promise<{ result: any; code: number | null; stderr: string; ms: number }>((resolve) => {
    const t0 = Date.now();
    const child = spawn(process.execPath, ['--import', 'tsx', join(root, 'test/gpu/health-worker.mts')], {
      env: { ...process.env, ...standinEnv(), ...env }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '', err = '';
    child.stdout.on('data', (d: Buffer) => { out += d.toString(); });
    child.stderr.on('data', (d: Buffer) => { err += d.toString(); });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      const line = out.split('\n').find((l) => l.startsWith('RESULT '));
      resolve({ result: line ? JSON.parse(line.slice(7)) : undefined, code, stderr: err, ms: Date.now() - t0 });
    });
  });
}

describe('nvml health on the stand-in', () => {
  it('defaults: 8 healthy H100-like GPUs; unsupported counters are null, not errors', async () => {
    const { result, stderr } = await worker({ SCENARIO: 'health' });
    const r = result as HealthReport;
    expect(r, stderr).toBeDefined();
    expect(r.driverVersion).toBe('570.133.20-standin');
    expect(r.cudaDriverVersion).toBe(12080);
    expect(r.healthy).toBe(true);
    expect(r.devices.length).toBe(8);
    r.devices.forEach((d, i) => {
      expect(d.index).toBe(i);
      expect(d.name).toBe('NVIDIA H100 80GB HBM3');
      // Same bus ids as the CUDA stand-in, so CUDA ordinals join NVML devices.
      expect(d.pciBusId).toBe(`00000000:${(0x18 + i).toString(16).toUpperCase()}:00.0`);
      expect(d.ecc).toEqual({ enabled: true, pendingEnabled: true, volatile: { corrected: 0, uncorrected: 0 }, aggregate: { corrected: 0, uncorrected: 0 } });
      expect(d.retiredPages).toBeNull();  // NOT_SUPPORTED on Hopper: rows are remapped instead
      expect(d.fabric).toBeNull();
      expect(d.remappedRows).toEqual({ corrected: 0, uncorrected: 0, pending: false, failed: false });
      expect(d.clockEventReasons).toEqual({ mask: 1, reasons: ['gpuIdle'] });
      expect(d.temperatureC).toBe(34);
      expect(d.powerMilliwatts).toBe(71000);
      expect(d.memory).toEqual({ total: 85520809984, reserved: 566231040, used: 0, free: 85520809984 - 566231040 });
      expect(d.nvlinks?.length).toBe(18);
      expect(d.nvlinks?.every((l) => l.active && l.errors.replay === 0)).toBe(true);
      expect(d.errors).toEqual({});
      expect(d.problems).toEqual([]);
    });
  }, 30000);

  it('a sick node: ECC, remapping, throttling, GB200 fabric, an NVML error and a lost GPU', async () => {
    const cfg = config('sick', {
      devices: [
        {
          ecc: { volatile: { corrected: 5, uncorrected: 3 }, aggregate: { corrected: 12, uncorrected: 4 } },
          remappedRows: { corrected: 1, uncorrected: 2, pending: 1, failed: 0 },
          clockEventReasons: 0x48, power: { nvmlError: 4 }, temperature: null, pcieReplay: 9, nvlinks: 4,
          nvlinkErrors: { replay: 0, recovery: 0, crcFlit: 6, crcData: 0, eccData: 0 },
          // GB200: registered with the fabric, limited capacity; degradedBW true, routeRecovery false.
          fabric: { state: 3, status: 0, cliqueId: 7, cluster: 16, healthMask: 1 | (2 << 2), healthSummary: 3 },
        },
        { lost: true },
        { retiredPages: { singleBit: 2, doubleBit: 1, pending: true }, remappedRows: null, fabric: { state: 2, healthSummary: 1 } },
      ],
    });
    const { result, stderr } = await worker({ SCENARIO: 'health', NCCL_NODE_NVML_STANDIN_CONFIG: cfg });
    const r = result as HealthReport;
    expect(r?.devices?.length, stderr).toBe(3);
    expect(r.healthy).toBe(false);
    const [a, b, c] = r.devices as [GpuHealth, GpuHealth, GpuHealth];
    expect(a.ecc?.volatile).toEqual({ corrected: 5, uncorrected: 3 });
    expect(a.ecc?.aggregate).toEqual({ corrected: 12, uncorrected: 4 });
    expect(a.clockEventReasons?.reasons).toEqual(['hwSlowdown', 'hwThermalSlowdown']);
    expect(a.powerMilliwatts).toBeNull();
    expect(a.temperatureC).toBeNull();
    expect(a.errors).toEqual({ powerMilliwatts: 'NVML_ERROR_NO_PERMISSION' });  // temperature: unsupported, silent
    expect(a.pcieReplayCount).toBe(9);
    expect(a.nvlinks?.map((l) => l.errors.crcFlit)).toEqual([6, 0, 0, 0]);
    expect(a.fabric).toMatchObject({
      state: 'completed', status: 'NVML_SUCCESS', cliqueId: 7, healthSummary: 'limited_capacity',
      degradedBandwidth: true, routeRecovery: false, routeUnhealthy: null, clusterUuid: '101112131415161718191a1b1c1d1e1f',
    });
    expect(a.problems).toEqual([
      'NVML errors reading powerMilliwatts (NVML_ERROR_NO_PERMISSION)',
      '3 uncorrected ECC errors since the driver loaded',
      'row remapping pending: reset the GPU',
      'clocks slowed: hwSlowdown, hwThermalSlowdown',
      'fabric limited capacity',
    ]);
    expect(b.temperatureC).toBeNull();
    expect(b.errors.temperatureC).toBe('NVML_ERROR_GPU_IS_LOST');
    expect(b.problems).toEqual(['GPU is lost (NVML_ERROR_GPU_IS_LOST): reset or reboot']);
    expect(c.retiredPages).toEqual({ singleBit: 2, doubleBit: 1, pending: true });
    expect(c.remappedRows).toBeNull();
    expect(c.problems).toEqual(['page retirement pending: reset the GPU', 'fabric registration in_progress']);
    expect(assess({ ...c, errors: {}, fabric: null, retiredPages: null })).toEqual([]);
  }, 30000);

  it('a missing library is ERR_UNAVAILABLE naming NCCL_NODE_LIBNVML; a bad config fails nvmlInit with ERR_NVML', async () => {
    const missing = await worker({ SCENARIO: 'health', NCCL_NODE_LIBNVML: join(dir, 'no-such-libnvidia-ml.so.1') });
    expect(missing.result.fatal.code).toBe('ERR_UNAVAILABLE');
    expect(missing.result.fatal.message).toMatch(/NCCL_NODE_LIBNVML/);
    const bad = await worker({ SCENARIO: 'health', NCCL_NODE_NVML_STANDIN_CONFIG: config('bad', 'x').replace('.json', '.nope') });
    expect(bad.result.fatal.code).toBe('ERR_NVML');
    expect(bad.result.fatal.message).toMatch(/nvmlInit_v2 failed: NVML_ERROR_UNKNOWN/);
  }, 30000);

  it('onXid streams timed and file-injected Xid events; stop() is prompt', async () => {
    const xidFile = join(dir, 'xid.txt');
    writeFileSync(xidFile, '');
    const cfg = config('xid', { count: 2, xid: [{ device: 1, xid: 79, afterMs: 50 }], xidFile });
    const { result, stderr } = await worker({ SCENARIO: 'xid', NCCL_NODE_NVML_STANDIN_CONFIG: cfg, XID_FILE: xidFile });
    expect(result?.fatal, stderr).toBeUndefined();
    expect(result.devices).toBe(2);
    expect(result.events.map((e: any) => [e.device, e.type, e.xid])).toEqual([[1, 'xid', 79], [0, 'xid', 48]]);
    expect(result.events[0].uuid).toBe('GPU-5ta0d1n0-0000-4000-8000-000000000001');
    expect(result.events[0].gpuInstanceId).toBeNull();
    expect(result.events[1].atMs).toBeGreaterThanOrEqual(150);
    expect(result.stopMs).toBeLessThan(500);
  }, 30000);

  it('an unstopped watch does not keep the process alive', async () => {
    const { result, code, ms } = await worker({ SCENARIO: 'xid-unref' }, 15000);
    expect(result).toEqual({ devices: 8 });
    expect(code).toBe(0);
    expect(ms).toBeLessThan(10000);
  }, 30000);

  it('the stand-in library is where the tests expect it', () => {
    expect(standinEnv().NCCL_NODE_LIBNVML).toBe(join(standins, 'libnvidia-ml.so.1'));
  });
});
