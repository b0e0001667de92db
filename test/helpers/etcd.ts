/**
 * A real etcd server (Debian's etcd-server package) for rendezvous tests: one member on
 * free loopback ports with a temporary data directory, killed and removed by stop().
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { freePort } from './ranks.js';

export interface EtcdServer {
  /** host:port of the client URL, as --rdzv-endpoint takes it. */
  endpoint: string;
  url: string;
  output: () => string;
  stop: () => Promise<void>;
}

const ETCD = '/usr/bin/etcd';

/** Installs etcd-server from Debian's archive when it is missing (works offline here). */
export function ensureEtcd(): void {
  if (existsSync(ETCD)) return;
  execFileSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', 'etcd-server'], {
    env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    stdio: 'ignore',
    timeout: 120_000,
  });
}

export async function startEtcd(): Promise<EtcdServer> {
  ensureEtcd();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'nccl-node-etcd-'));
  const [clientPort, peerPort] = [await freePort(), await freePort()];
  const url = `http://127.0.0.1:${clientPort}`;
  const peer = `http://127.0.0.1:${peerPort}`;
  const child: ChildProcess = spawn(ETCD, [
    '--name', 'test', '--data-dir', dir,
    '--listen-client-urls', url, '--advertise-client-urls', url,
    '--listen-peer-urls', peer, '--initial-advertise-peer-urls', peer,
    '--initial-cluster', `test=${peer}`, '--initial-cluster-state', 'new',
    // Short raft timings: leases as short as 2 s are accepted and a test's TTL is not rounded up.
    '--heartbeat-interval', '50', '--election-timeout', '500',
  ], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (out += d.toString()));
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) {
      const gone = new Promise((r) => child.once('exit', r));
      child.kill('SIGKILL');
      await gone;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 20_000;
  for (;;) {
    if (child.exitCode !== null) {
      await stop();
      throw new Error(`etcd exited with ${child.exitCode}: ${out.slice(-2000)}`);
    }
    try {
      const res = await fetch(`${url}/health`);
      if (res.ok && ((await res.json()) as { health?: string }).health === 'true') break;
    } catch {
      // Not listening yet.
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`etcd did not become healthy within 20 s: ${out.slice(-2000)}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { endpoint: `127.0.0.1:${clientPort}`, url, output: () => out, stop };
}
