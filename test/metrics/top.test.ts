/**
 * `nccl-node top` against a running 2-rank job: the command line scrapes the ranks'
 * endpoints while they train and shows, per rank, the values each rank recorded
 * itself (its TrainMetrics samples, reported by the worker after the run: the
 * reference); once the job is gone it shows every rank down and exits 1.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { renderTop, type JobView } from '../../src/metrics/top.js';
import type { StepSample } from '../../src/metrics/index.js';
import { freePortRun, runRanks } from '../helpers/ranks.js';

const STEPS = 8;
const top = (...args: string[]) => spawnSync(process.execPath, ['bin/nccl-node.js', 'top', '--once', ...args], { encoding: 'utf8', timeout: 30_000 });

describe('nccl-node top', () => {
  it('shows each rank of a running job as the rank recorded it, then every rank down', async () => {
    // Rank r serves on port + r: both ports must stay free until the ranks listen.
    const port = await freePortRun(2);
    const dir = mkdtempSync(join(tmpdir(), 'nccl-node-top-'));
    try {
      // Rank 1's data source sleeps: its step time is the longer one; the job waits for a scrape after its last step.
      const job = runRanks<{ samples: StepSample[] }>('test/metrics/train-worker.ts', 2, {
        payload: { steps: STEPS, globalBatch: 8, delayMs: { 1: 120 }, port, logDir: dir, waitScrape: true, stragglers: true },
        check: true, timeoutMs: 60_000,
      });
      let last: JobView | undefined;
      const deadline = Date.now() + 45_000;
      while (Date.now() < deadline) {
        const r = top('--json', '--port', String(port), '--nproc-per-node', '2');
        if (r.stdout) last = JSON.parse(r.stdout) as JobView;
        if (last && last.up === 2 && last.ranks.every((x) => x.step === STEPS)) break;
        await sleep(100);
      }
      const ranks = await job;
      expect(last?.ranks.map((r) => [r.rank, r.up, r.step])).toEqual([[0, true, STEPS], [1, true, STEPS]]);
      for (const [i, view] of last!.ranks.entries()) {
        const s = ranks[i]!.result!.samples.at(-1)!;
        // The same doubles: prom-client prints them in full, the parser reads them back exactly.
        expect(view.loss).toBe(s.loss);
        expect(view.stepSeconds).toBe(s.seconds);
        expect(view.tokensPerSecond).toBe(s.tokensPerSecond);
        expect(view.residentBytes).toBe(s.rssBytes);
        expect(view.commShare).toBeCloseTo(s.phases.comm / s.seconds, 12);
      }
      // The straggler verdict the ranks agree on: rank 1, whose data source sleeps every step, is the culprit.
      expect(last!.ranks.map((r) => r.stragglerState)).toEqual(['victim', 'chronic']);
      expect(last!.ranks[1]!.stragglerScore!).toBeGreaterThan(last!.ranks[0]!.stragglerScore!);
      expect(last!.slowestRank).toBe(last!.ranks[0]!.stepSeconds! > last!.ranks[1]!.stepSeconds! ? 0 : 1);
      expect(last!.tokensPerSecond).toBeCloseTo(last!.ranks[0]!.tokensPerSecond! + last!.ranks[1]!.tokensPerSecond!, 6);
      // The table (the live view's frame, drawn here from the same scrape): a row per rank with its step.
      const frame = renderTop(last!);
      expect(frame).toMatch(/ranks up 2\/2/);
      expect(frame).toMatch(new RegExp(`│ 0\\s+│ ${STEPS}\\s+│`));
      expect(frame).toMatch(new RegExp(`│ 1\\s+│ ${STEPS}\\s+│`));

      // The job has ended: both endpoints refuse, top says so and exits 1.
      const gone = top('--port', String(port), '--nproc-per-node', '2');
      expect(gone.status).toBe(1);
      expect(gone.stdout).toMatch(/ranks up 0\/2/);
      expect(gone.stdout.match(/DOWN http:\/\/localhost:\d+\/metrics: ECONNREFUSED/g)).toHaveLength(2);
      // Usage errors.
      const none = spawnSync(process.execPath, ['bin/nccl-node.js', 'top'], { encoding: 'utf8' });
      expect(none.status).toBe(2);
      expect(none.stderr).toMatch(/give targets/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);
});
