/**
 * The sources of "known gone" (src/ft/gone.ts), each against the thing it reads: the
 * error the launcher's failure record turns into (heartbeat.ts peerLostError), the
 * record the launcher writes when it restarts a rank alone (RankRestarts.publish
 * through the view of a real store server), and the process table (a child process
 * killed, a zombie that nobody reaps). Launcher RANKs map to the previous
 * generation's ranks of the very process (RANK, life and pid), never by RANK alone.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StoreServer } from '../../src/rendezvous/server.js';
import { StoreClient } from '../../src/rendezvous/client.js';
import { serverView } from '../../src/launch/keyview.js';
import { RankRestarts } from '../../src/launch/rank-restart.js';
import { peerLostError } from '../../src/comm/heartbeat.js';
import { NcclNodeError } from '../../src/errors.js';
import { goneByCause, goneNow, HOST_KEY, pidGone } from '../../src/ft/gone.js';
import type { Member } from '../../src/ft/membership.js';

let server: StoreServer;
let store: StoreClient;
beforeAll(async () => {
  server = await StoreServer.start({ host: '127.0.0.1', port: 0, token: 't' });
  store = await StoreClient.connect({ host: '127.0.0.1', port: server.port, token: 't' });
});
afterAll(async () => {
  await store.close();
  await server.close();
});

const member = (rank: number, founding: number, pid: number, extra: Partial<Member> = {}): Member =>
  ({ id: `m${rank}`, prevRank: rank, step: 3, ticket: rank + 1, rank, founding, life: 0, pid, host: 'elsewhere', ...extra });

describe('known gone', () => {
  it("maps the launcher's failed RANK and pid to the previous rank of that process only", () => {
    // RANK 5 is now group rank 1 (pid 222); group rank 2 is RANK 7.
    const members = [member(0, 0, 111), member(1, 5, 222), member(2, 7, 333)];
    const record = { reason: 'signal' as const, rank: 5, pid: 222, signal: 'SIGKILL', exitCode: 137, node: 0, host: 'h', message: 'rank 5 (pid 222) was killed by signal SIGKILL' };
    expect(goneByCause(members, peerLostError(0, record))).toEqual([1]);
    // An earlier life of RANK 5 (another pid) says nothing about this one.
    expect(goneByCause(members, peerLostError(0, { ...record, pid: 999 }))).toEqual([]);
    // Errors that name no rank: Gloo's dropped connection, a timeout, anything else.
    expect(goneByCause(members, new NcclNodeError('ERR_PEER_LOST', 'a peer closed its connection or died'))).toEqual([]);
    expect(goneByCause(members, new NcclNodeError('ERR_TIMEOUT', 'x', { failedRank: 5 }))).toEqual([]);
    expect(goneByCause(members, new Error('x'))).toEqual([]);
  });

  it("reads the launcher's rank-restart record for the member's own life", async () => {
    const restarts = new RankRestarts({ restartScope: 'rank', maxRestarts: 3 });
    const record = { reason: 'exit' as const, rank: 4, pid: 444, exitCode: 1, node: 0, host: 'h', message: 'rank 4 (pid 444) exited with code 1' };
    const members = [member(0, 0, 100), member(1, 4, 444), member(2, 6, 666, { life: 1 })];
    expect(await goneNow(store, members, 'm0', true)).toEqual([]);
    const { restarts: n } = restarts.take(record, 0);
    await restarts.publish(serverView(server), record, n, 445);
    expect(await goneNow(store, members, 'm0', true)).toEqual([1]);
    // Not under a launcher: its records are not consulted.
    expect(await goneNow(store, members, 'm0', false)).toEqual([]);
    // RANK 6 on its second life (life 1) is gone only once restart 2 is recorded.
    const r6 = { ...record, rank: 6, pid: 666 };
    restarts.take(r6, 0);
    await restarts.publish(serverView(server), r6, 1, 667);
    expect(await goneNow(store, members, 'm0', true)).toEqual([1]);
    await restarts.publish(serverView(server), r6, restarts.take(r6, 0).restarts, 668);
    expect(await goneNow(store, members, 'm0', true)).toEqual([1, 2]);
  });

  it.runIf(HOST_KEY !== undefined)('reads the process table for members on this machine: exited and zombie pids are gone', async () => {
    const child = spawn('sleep', ['30'], { stdio: 'ignore' });
    // A shell that starts a short child and becomes `sleep`, which never reaps it: a zombie.
    const parent = spawn('sh', ['-c', 'sleep 0 & echo $!; exec sleep 30'], { stdio: ['ignore', 'pipe', 'ignore'] });
    const zombie = Number(await new Promise<string>((res) => parent.stdout.once('data', (d: Buffer) => res(d.toString()))));
    const deadline = Date.now() + 5000;
    const state = (): string => readFileSync(`/proc/${zombie}/stat`, 'utf8').replace(/^.*\) /s, '')[0]!;
    while (state() !== 'Z' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    expect(state()).toBe('Z'); // still in the process table, as a zombie
    const members = [member(0, 0, process.pid, { host: HOST_KEY }), member(1, 1, child.pid!, { host: HOST_KEY }), member(2, 2, zombie, { host: HOST_KEY }), member(3, 3, 999_999_999)];
    try {
      expect(pidGone(child.pid!)).toBe(false);
      // The zombie is gone; a pid on another machine is never judged from here.
      expect(await goneNow(store, members, 'm0', false)).toEqual([2]);
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
      expect(await goneNow(store, members, 'm0', false)).toEqual([1, 2]);
      expect(pidGone(process.pid)).toBe(false);
    } finally {
      child.kill('SIGKILL');
      parent.kill('SIGKILL');
    }
  });
});
