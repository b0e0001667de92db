/**
 * Elastic HSDP under the launcher: `nccl-node run --restart-scope rank` with 4 ranks as
 * 2 replicas x 2 shards (test/ft/hsdp-launch-worker.ts). Founding rank 2 SIGKILLs
 * itself before step K on its first life; the launcher restarts rank 2 alone, the new
 * process joins the group (ElasticGroup.start joins when told it is a restarted rank),
 * takes back slot 2 and receives shard 0 live. Replica 0 never stops. Reference: plain
 * HSDP legs at 2 x 2 for [0, K), 1 x 2 for [K, J), 2 x 2 for [J, N), where J is the step
 * at which the replica came back (from the reports): the final full parameters of every
 * rank must be bit-identical to it; every step's ids, in data-parallel rank order, the
 * loader's global order.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { config, corpus, expectedIds } from './fixture.js';
import { hsdpReferenceChain } from './hsdp-fixture.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.join(ROOT, 'bin/nccl-node.js');
const K = 2, GROW_AT = 4, N = 7;

interface Step { step: number; ids: number[]; dpRank: number; dpSize: number; slot: number }
interface End { rank: number; pid: number; restarts: number; slot: number; decisions: { action: string; size: number; transferBytes: number }[]; params: string }
interface Start { rank: number; pid: number; restarts: number; rejoin: boolean }

const started: ChildProcess[] = [];
afterEach(() => {
  for (const c of started.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

describe('elastic HSDP under nccl-node run --restart-scope rank', () => {
  it('rank 2 is killed: only it is restarted, its replica comes back with its shard, and all ranks match the 2x2 / 1x2 / 2x2 legs exactly', async () => {
    const cfg = { ...config(await corpus(), N), hsdp: { shard: 2 } };
    const out = mkdtempSync(path.join(os.tmpdir(), 'nccl-node-hsdp-run-'));
    const payload = { cfg, windowMs: 1000, timeoutMs: 20_000, faultRank: 2, faultAt: K, growAt: GROW_AT };
    const child = spawn(process.execPath, [BIN, 'run', '--nproc-per-node', '4', '--restart-scope', 'rank', '--max-restarts', '2',
      '--heartbeat-interval', '0.25', '--grace-period', '1', '--join-timeout', '30', 'test/ft/hsdp-launch-worker.ts'], {
      cwd: ROOT,
      env: { ...process.env, NCCL_NODE_TOKEN: undefined, FT_OUT: out, FT_PAYLOAD: JSON.stringify(payload) },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    started.push(child);
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => {
      const timer = setTimeout(() => child.kill('SIGKILL'), 45_000);
      child.on('close', (c) => {
        clearTimeout(timer);
        resolve(c);
      });
    });
    const why = stderr.split('\n').filter((l) => !l.startsWith('{')).slice(-30).join('\n');
    expect(code, why).toBe(0);
    expect(stderr.match(/restarting rank/g)).toHaveLength(1);
    expect(stderr).not.toMatch(/restarting the gang/);
    const read = <T>(kind: string): T[] => readdirSync(out).filter((f) => f.startsWith(`${kind}-`)).map((f) => JSON.parse(readFileSync(path.join(out, f), 'utf8')) as T);
    const starts = read<Start>('start');
    const lives = (r: number) => starts.filter((s) => s.rank === r).sort((a, b) => a.restarts - b.restarts);
    for (const r of [0, 1, 3]) expect(lives(r)).toHaveLength(1);
    expect(lives(2).map((s) => [s.restarts, s.rejoin])).toEqual([[0, false], [1, true]]);
    const ends = read<End>('end').sort((a, b) => a.rank - b.rank);
    expect(ends.map((e) => [e.rank, e.slot])).toEqual([[0, 0], [1, 1], [2, 2], [3, 3]]);
    expect(ends[2]!.pid).toBe(lives(2)[1]!.pid);

    const steps = readdirSync(out).filter((f) => f.startsWith('steps-')).flatMap((f) => readFileSync(path.join(out, f), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Step));
    const sizes = Array.from({ length: N }, (_, s) => steps.filter((x) => x.step === s && x.dpRank === 0).map((x) => x.dpSize));
    const J = sizes.findIndex((v, i) => i >= K && v[0] === 4);
    expect(J).toBeGreaterThan(K);
    expect(J).toBeLessThanOrEqual(GROW_AT);
    expect(sizes).toEqual(Array.from({ length: N }, (_, s) => [s < K || s >= J ? 4 : 2]));
    for (const e of ends.filter((x) => x.rank !== 2)) expect(e.decisions.map((d) => [d.action, d.size])).toEqual([['shrink', 2], ['grow', 4]]);
    console.log(`launcher HSDP: replica back at step ${J}; rank 0: ${JSON.stringify(ends[0]!.decisions)}`);

    const ref = await hsdpReferenceChain(cfg, [{ size: 4, from: 0, to: K }, { size: 2, from: K, to: J }, { size: 4, from: J, to: N }]);
    for (const e of ends) {
      const got = new Float32Array(new Uint8Array(Buffer.from(e.params, 'base64')).buffer);
      expect(Array.from(got), `rank ${e.rank}`).toEqual(Array.from(ref.params));
    }
    const byStep = Array.from({ length: N }, (_, s) => steps.filter((x) => x.step === s).sort((a, b) => a.dpRank - b.dpRank).flatMap((x) => x.ids));
    expect(byStep.flat()).toEqual(expectedIds(N, cfg.dataSeed, cfg.globalBatch));
    for (let s = 0; s < N; s++) expect(byStep[s], `step ${s}`).toEqual(ref.ids.get(s));
  }, 60_000);
});
