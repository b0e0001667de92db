/**
 * The node self-test (src/launch/health-check.ts) and `nccl-node run --health-check`: a
 * node whose store connection or local collective fails is refused and named, and its
 * ranks never start; a healthy node runs the job as without the flag.
 */
import os from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runHealthCheck } from '../../src/launch/health-check.js';
import { StoreServer } from '../../src/rendezvous/server.js';
import { runCli } from '../helpers/cli.js';

const FIXTURE = 'test/launch/fixtures/heartbeat-rank.mts';

let server: StoreServer;
beforeAll(async () => {
  server = await StoreServer.start({ host: '127.0.0.1', port: 0, token: 'health-token', log: () => {} });
});
afterAll(async () => {
  await server.close();
});

const cli = (args: string[], env: NodeJS.ProcessEnv) => runCli(['run', ...args], env, 40_000);

describe('node health check', { timeout: 60_000 }, () => {
  it('passes on this machine: the store answers and a 3-rank all-reduce of 1..3 gives 6', async () => {
    const checks = await runHealthCheck({ storeHost: '127.0.0.1', storePort: server.port, token: 'health-token', localRanks: 3, timeoutMs: 10_000, env: {} });
    expect(checks.map(({ name, ok, detail }) => ({ name, ok, detail }))).toEqual([
      { name: 'store', ok: true, detail: `reached the store at 127.0.0.1:${server.port}` },
      { name: 'collective', ok: true, detail: '3-rank Gloo all-reduce gave 6' },
    ]);
  });

  it('fails the store check on a wrong token, and skips the rest', async () => {
    const checks = await runHealthCheck({ storeHost: '127.0.0.1', storePort: server.port, token: 'not-the-token', localRanks: 2, timeoutMs: 2_000, env: {} });
    expect(checks).toEqual([expect.objectContaining({ name: 'store', ok: false, detail: expect.stringMatching(/^ERR_UNAUTHORIZED: /) as unknown as string })]);
  });

  it('fails the collective check when Gloo cannot listen on the configured interface', async () => {
    const checks = await runHealthCheck({ storeHost: '127.0.0.1', storePort: server.port, token: 'health-token', localRanks: 2, timeoutMs: 5_000, env: { NCCL_NODE_SOCKET_IFNAME: 'nosuch0' } });
    expect(checks.map((c) => [c.name, c.ok])).toEqual([['store', true], ['collective', false]]);
    expect(checks[1]!.detail).toMatch(/nosuch0/);
  });

  it('nccl-node run --health-check refuses a failing node by name and starts no rank; a healthy one runs', async () => {
    const bad = await cli(['--health-check', '--nproc-per-node', '2', FIXTURE], { NCCL_NODE_SOCKET_IFNAME: 'nosuch0' });
    expect(bad.code).toBe(1);
    expect(bad.out).not.toMatch(/HB /);
    const host = os.hostname().replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    expect(bad.err).toMatch(new RegExp(`nccl-node run: node ${host} failed its health check \\(collective: ERR_BACKEND: [^\\n]*nosuch0[^\\n]*\\); it does not join the rendezvous`));
    expect(bad.err).toMatch(/error \[ERR_LAUNCH\]/);

    const good = await cli(['--health-check', '--nproc-per-node', '2', FIXTURE], { HB_PLAN: 'finish' });
    expect({ code: good.code, err: good.code === 0 ? '' : good.err }).toEqual({ code: 0, err: '' });
    expect(good.out.match(/HB finished attempt=0 rank=\d sum=3/g)).toHaveLength(2);
  });
});
