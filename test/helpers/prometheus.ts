/**
 * A real Prometheus server for tests: Debian's `prometheus` package, installed with
 * apt-get when missing (CI runs as root), started on a generated config with its
 * database in a temp directory, queried over its HTTP API.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { freePort } from './ranks.js';

export function prometheusPath(): string {
  const which = () => spawnSync('bash', ['-c', 'command -v prometheus'], { encoding: 'utf8' }).stdout.trim();
  if (which()) return which();
  if (process.getuid?.() !== 0) throw new Error('prometheus is not installed and this is not root: apt-get install prometheus');
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  execFileSync('apt-get', ['update', '-qq'], { env, stdio: 'pipe', timeout: 600_000 });
  execFileSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', 'prometheus'], { env, stdio: 'pipe', timeout: 900_000 });
  if (!which()) throw new Error('apt-get installed prometheus, but it is not on PATH');
  return which();
}

export interface Prometheus {
  url: string;
  /** /api/v1/query: the result vector or matrix of an instant query. */
  query(q: string): Promise<{ metric: Record<string, string>; value?: [number, string]; values?: [number, string][] }[]>;
  /** Resolves once every target's last scrape failed (the job has exited); throws after `timeoutMs`. */
  targetsDown(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
  log(): string;
}

/** Starts Prometheus scraping `targets` (host:port) every `intervalS` seconds; resolves once it is ready. */
export async function startPrometheus(targets: string[], intervalS = 1): Promise<Prometheus> {
  const dir = mkdtempSync(join(tmpdir(), 'nccl-node-prometheus-'));
  const config = join(dir, 'prometheus.yml');
  writeFileSync(config, stringify({
    global: { scrape_interval: `${intervalS}s`, scrape_timeout: `${intervalS}s` },
    scrape_configs: [{ job_name: 'nccl-node-train', static_configs: [{ targets }] }],
  }));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  let out = '';
  const child: ChildProcess = spawn(prometheusPath(), [
    `--config.file=${config}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn',
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(t);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  // Ready, and the targets handed to the scrape loops (discovery updates come up to 5 s
  // after start), so scraping starts as soon as the targets answer.
  const deadline = Date.now() + 30_000;
  const targetsActive = async (): Promise<boolean> => {
    const res = await fetch(`${url}/api/v1/targets`);
    return res.ok && ((await res.json()) as { data: { activeTargets: unknown[] } }).data.activeTargets.length === targets.length;
  };
  for (;;) {
    if (child.exitCode !== null) throw new Error(`prometheus exited with ${child.exitCode}: ${out}`);
    const ok = await targetsActive().catch(() => false);
    if (ok) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`prometheus did not become ready with its targets in 30 s: ${out}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return {
    url,
    async query(q) {
      const res = await fetch(`${url}/api/v1/query?query=${encodeURIComponent(q)}`);
      const body = (await res.json()) as { status: string; error?: string; data: { result: [] } };
      if (body.status !== 'success') throw new Error(`query ${q}: ${body.error}`);
      return body.data.result;
    },
    async targetsDown(timeoutMs = 15_000) {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const res = await fetch(`${url}/api/v1/targets`);
        const body = (await res.json()) as { data: { activeTargets: { health: string }[] } };
        if (body.data.activeTargets.every((t) => t.health === 'down')) return;
        if (Date.now() > until) throw new Error(`targets still up after ${timeoutMs} ms: ${JSON.stringify(body.data.activeTargets)}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    },
    stop,
    log: () => out,
  };
}
