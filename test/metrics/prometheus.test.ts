// The metrics as tools read them: a real Prometheus scrapes a 2-rank training job's
// endpoints every second and its HTTP API returns what the job logged; Python's
// prometheus_client parser reads the endpoint text back to prom-client's own values;
// the JSON-lines logs parse, and carry rank, step and exactly the fields docs/metrics.md lists.
import { execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isNcclNodeError } from '../../src/errors.js';
import { serveMetrics, trainRegistry, type StepSample } from '../../src/metrics/index.js';
import { freePortRun, repoRoot, runRanks } from '../helpers/ranks.js';
import { venvWith } from '../helpers/python.js';
import { startPrometheus, type Prometheus } from '../helpers/prometheus.js';

interface Sample { name: string; labels: Record<string, string>; value: number }
interface WorkerResult {
  samples: StepSample[];
  text: string;
  json: { name: string; type: string; values: { value: number; labels: Record<string, string | number>; metricName?: string }[] }[];
  summary: { worldSize: number; ranks: { rank: number; steps: number }[] } | null;
  table: string | null;
}

const STEPS = 40;

/** Two consecutive free ports: each rank serves on port + LOCAL_RANK. */
const portPair = (): Promise<number> => freePortRun(2);

/** docs/metrics.md's rows `| name | unit | definition |` under a heading. */
function documented(section: string): string[][] {
  const doc = readFileSync(join(repoRoot, 'docs', 'metrics.md'), 'utf8');
  const body = doc.split(/^## /m).find((s) => s.startsWith(section));
  if (!body) throw new Error(`docs/metrics.md has no section "${section}"`);
  return body.split('\n').filter((l) => /^\|\s*`/.test(l)).map((l) => l.split('|').slice(1, -1).map((c) => c.trim().replace(/`/g, '')));
}

describe('metrics as Prometheus, prometheus_client and log readers see them', () => {
  const dir = mkdtempSync(join(tmpdir(), 'nccl-node-metrics-prom-'));
  const logDir = join(dir, 'logs');
  let prom: Prometheus;
  let results: WorkerResult[];
  let port = 0;

  beforeAll(async () => {
    port = await portPair();
    prom = await startPrometheus([`127.0.0.1:${port}`, `127.0.0.1:${port + 1}`], 1);
    try {
      // ~150 ms per step: 40 steps span several 1 s scrapes.
      const rs = await runRanks<WorkerResult>('test/metrics/train-worker.ts', 2, {
        payload: { steps: STEPS, globalBatch: 8, delayMs: { 0: 150, 1: 150 }, port, logDir, ckptDir: join(dir, 'ck'), ckptEvery: 10, waitScrape: true },
        check: true, timeoutMs: 50_000,
      });
      results = rs.map((r) => r.result!);
    } catch (err) {
      await prom.stop();
      throw err;
    }
  }, 90_000);

  afterAll(async () => {
    await prom?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("Prometheus's API returns both ranks' step counter and loss as the job logged them", async () => {
    // The job has exited and Prometheus has seen its endpoints go: an instant query of a
    // bare name now finds only staleness markers, so ask for each series' last sample.
    await prom.targetsDown();
    const steps = await prom.query('last_over_time(nccl_node_step[5m])');
    expect(steps.map((r) => [r.metric.rank, r.metric.job, r.value![1]]).sort()).toEqual([['0', 'nccl-node-train', String(STEPS)], ['1', 'nccl-node-train', String(STEPS)]]);
    const losses = await prom.query('last_over_time(nccl_node_loss[5m])');
    for (const rank of [0, 1]) {
      const got = losses.find((r) => r.metric.rank === String(rank))!;
      expect(Number(got.value![1])).toBe(results[rank]!.samples.at(-1)!.loss);
    }
    // Every scrape during the run: the loss it saw is the one logged for the step it saw.
    const stepSeries = await prom.query('nccl_node_step[5m]');
    const lossSeries = await prom.query('nccl_node_loss[5m]');
    for (const rank of [0, 1]) {
      const s = stepSeries.find((r) => r.metric.rank === String(rank))!.values!;
      const l = new Map(lossSeries.find((r) => r.metric.rank === String(rank))!.values!.map(([t, v]) => [t, Number(v)]));
      const seen = new Set<number>();
      for (const [t, v] of s) {
        const done = Number(v);
        if (done === 0) continue; // scraped before the first step
        expect(l.get(t)).toBe(results[rank]!.samples[done - 1]!.loss);
        seen.add(done);
      }
      expect(seen.size).toBeGreaterThanOrEqual(3);
      expect(seen.has(STEPS)).toBe(true);
    }
    // A counter Prometheus can rate: this rank's tokens, 4 rows of 8 per step.
    const tokens = await prom.query('last_over_time(nccl_node_tokens_total[5m])');
    expect(tokens.map((r) => Number(r.value![1]))).toEqual([STEPS * 32, STEPS * 32]);
  });

  it("the endpoint's text, parsed by prometheus_client, holds exactly prom-client's values", async () => {
    const venv = await venvWith(['prometheus_client']);
    const script = [
      'import json, sys',
      'from prometheus_client.parser import text_string_to_metric_families',
      'out = []',
      'for fam in text_string_to_metric_families(open(sys.argv[1]).read()):',
      '    for s in fam.samples:',
      '        out.append({"family": fam.name, "type": fam.type, "name": s.name, "labels": s.labels, "value": repr(float(s.value))})',
      'print(json.dumps(out))',
    ].join('\n');
    for (const r of results) {
      const file = join(dir, `metrics-${Math.random().toString(36).slice(2)}.txt`);
      writeFileSync(file, r.text);
      const parsed = JSON.parse(execFileSync(venv.python, ['-c', script, file], { encoding: 'utf8' })) as (Sample & { family: string; type: string; value: string })[];
      const key = (name: string, labels: Record<string, string | number>) =>
        `${name}{${Object.entries(labels).map(([k, v]) => `${k}=${String(v)}`).sort().join(',')}}`;
      const num = (v: string) => (v === 'inf' ? Infinity : v === '-inf' ? -Infinity : Number(v));
      const fromPython = new Map(parsed.map((s) => [key(s.name, s.labels), num(s.value)]));
      const fromRegistry = new Map(r.json.flatMap((m) => m.values.map((v) => [key(v.metricName ?? m.name, v.labels), v.value] as const)));
      expect(fromPython.size).toBeGreaterThan(40);
      expect([...fromPython.keys()].sort()).toEqual([...fromRegistry.keys()].sort());
      for (const [k, v] of fromRegistry) expect(fromPython.get(k), k).toBe(v);
      // Types survive too (prometheus_client names a counter family without its _total).
      const types = new Map(parsed.map((s) => [s.family, s.type]));
      for (const m of r.json) expect(types.get(m.type === 'counter' ? m.name.replace(/_total$/, '') : m.name), m.name).toBe(m.type);
    }
  });

  it('documents every metric family in docs/metrics.md', () => {
    const names = new Set(documented('Prometheus metrics').map((row) => row[0]!));
    expect([...new Set(results[0]!.json.map((m) => m.name))].filter((n) => !names.has(n))).toEqual([]);
    expect([...names].filter((n) => !results[0]!.json.some((m) => m.name === n))).toEqual([]);
  });

  it('writes JSON lines that parse, each with rank, step and the documented fields of its event', () => {
    const fields = new Map<string, Set<string>>();
    for (const [event, field] of documented('JSON-lines events')) (fields.get(event!) ?? fields.set(event!, new Set()).get(event!)!).add(field!);
    const pinoFields = ['level', 'time', 'pid', 'hostname', 'msg'];
    for (const rank of [0, 1]) {
      const lines = readFileSync(join(logDir, `rank-${rank}.jsonl`), 'utf8').trimEnd().split('\n');
      const events = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
      for (const e of events) {
        expect(e.rank).toBe(rank);
        expect(Number.isInteger(e.step)).toBe(true);
        const want = fields.get(e.event as string);
        expect(want, `event ${String(e.event)} is documented`).toBeDefined();
        // `*` rows: the fields every event carries.
        expect(Object.keys(e).filter((k) => !pinoFields.includes(k)).sort()).toEqual([...fields.get('*')!, ...want!].sort());
      }
      const steps = events.filter((e) => e.event === 'step');
      expect(steps.map((e) => e.step)).toEqual([...Array(STEPS).keys()]);
      expect(steps.map((e) => e.loss)).toEqual(results[rank]!.samples.map((s) => s.loss));
      expect(events.filter((e) => e.event === 'checkpoint').map((e) => e.step)).toEqual([10, 20, 30, 40]);
      expect(events[0]!.event).toBe('start');
    }
    const summary = JSON.parse(readFileSync(join(logDir, 'summary.json'), 'utf8')) as WorkerResult['summary'];
    expect(summary!.ranks.map((r) => [r.rank, r.steps])).toEqual([[0, STEPS], [1, STEPS]]);
    expect(results[0]!.table).toMatch(/tok\/s/);
    expect(existsSync(join(logDir, 'rank-1.jsonl'))).toBe(true);
  });
});

describe('examples/train.ts --metrics-port / --log-dir under the launcher', () => {
  it('serves rank r on port + LOCAL_RANK, logs per rank and prints the summary table on rank 0', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'nccl-node-metrics-cli-'));
    try {
      const port = await portPair();
      const { stdout } = await promisify(execFile)(process.execPath, ['bin/nccl-node.js', 'run', '--prefix', '--nproc-per-node', '2', 'examples/train.ts',
        '--model', 'tiny', '--steps', '5', '--global-batch', '4', '--metrics-port', String(port), '--log-dir', dir], { cwd: repoRoot, timeout: 60_000 });
      expect(stdout).toContain(`[0] rank 0: metrics at http://127.0.0.1:${port}/metrics`);
      expect(stdout).toContain(`[1] rank 1: metrics at http://127.0.0.1:${port + 1}/metrics`);
      expect(stdout).toMatch(/^\[0\] rank\s+steps\s+step ms\s+compute\s+comm\s+data\s+ckpt\s+tok\/s\s+MFU\s+RSS$/m);
      expect(stdout).toMatch(/^\[0\] 2 ranks: \d+ tokens\/s, MFU [\d.e+-]+% of measured \(cpu, js-float32\)$/m);
      for (const rank of [0, 1]) {
        const steps = readFileSync(join(dir, `rank-${rank}.jsonl`), 'utf8').trimEnd().split('\n').map((l) => JSON.parse(l) as { event: string; step: number })
          .filter((e) => e.event === 'step');
        expect(steps.map((e) => e.step)).toEqual([0, 1, 2, 3, 4]);
      }
      const summary = JSON.parse(readFileSync(join(dir, 'summary.json'), 'utf8')) as { worldSize: number; ranks: { steps: number }[] };
      expect([summary.worldSize, ...summary.ranks.map((r) => r.steps)]).toEqual([2, 5, 5]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);
});

describe('the metrics endpoint refuses what it cannot serve', () => {
  it('a port outside 0..65535 is ERR_INVALID_ARGUMENT, a port in use ERR_UNAVAILABLE', async () => {
    const { registry } = trainRegistry({ rank: '0' });
    for (const bad of [-1, 65536, 1.5, Number.NaN]) {
      await expect(serveMetrics(registry, bad, '127.0.0.1')).rejects.toSatisfy((e: unknown) => isNcclNodeError(e, 'ERR_INVALID_ARGUMENT') && /0\.\.65535/.test((e as Error).message));
    }
    const first = await serveMetrics(registry, 0, '127.0.0.1');
    try {
      const port = Number(new URL(first.url).port);
      await expect(serveMetrics(registry, port, '127.0.0.1')).rejects.toSatisfy((e: unknown) => isNcclNodeError(e, 'ERR_UNAVAILABLE') && /EADDRINUSE/.test((e as Error).message));
      const res = await fetch(first.url.replace('/metrics', '/other'));
      expect(res.status).toBe(404);
    } finally {
      await new Promise((r) => first.server.close(r));
    }
  });
});
