// Loss health: the detectors against hand-computed values, the collective decision
// against scripted peers, and 2-rank Gloo runs of TinyLM whose final parameters must
// equal, bit for bit, a plain run that never trained on the batches health dropped.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DivergenceDetector, LossHistory, SpikeDetector, relativeRise, zScore } from '../../src/metrics/loss-detectors.js';
import { LossHealth, LossHealthError } from '../../src/metrics/loss-health.js';
import { AdamW } from '../../src/runtime/optim.js';
import { runRanks } from '../helpers/ranks.js';
import { standinEnv } from '../gpu/helpers.js';

interface Out { rank: number; losses: string[]; events: { step: number; kind: string; action: string; ranks: number[]; data: { from: number; to: number; samples: number[] }; score: string }[]; params: number[] }

const dirs: string[] = [];
afterAll(() => dirs.forEach((d) => rmSync(d, { recursive: true, force: true })));

async function run(payload: Record<string, unknown>): Promise<Out[]> {
  const env = payload.device ? standinEnv() : {};
  const res = await runRanks<Out>('test/metrics/health-worker.ts', 2, { payload, env, check: true, timeoutMs: 60_000 });
  return res.map((x) => x.result!);
}

const history = (losses: number[]) => {
  const h = new LossHistory();
  losses.forEach((l, i) => h.accept(i, l));
  return h;
};

describe('detectors', () => {
  it('z-score: (x - mean) / population std of the window', () => {
    // window 1,2,3,4: mean 2.5, variance (2.25+0.25+0.25+2.25)/4 = 1.25
    expect(zScore(5, [1, 2, 3, 4])).toBeCloseTo(2.5 / Math.sqrt(1.25), 12);
    // a flat window: the deviation floor 1e-6 x max(1, |mean|)
    expect(zScore(3.00003, [3, 3, 3])).toBeCloseTo(0.00003 / 3e-6, 6);
  });

  it('spike: fires above the threshold only, over the last `window` losses, after minSamples', () => {
    const d = new SpikeDetector({ window: 4, threshold: 3, minSamples: 3 });
    expect(d.assess(100, history([1, 2])).fires).toBe(false); // 2 < minSamples
    const h = history([50, 1, 2, 3, 4]); // the window is 1..4: 50 has left it
    expect(d.assess(5, h).score).toBeCloseTo(2.5 / Math.sqrt(1.25), 12);
    expect(d.assess(5, h).fires).toBe(false); // z 2.236
    expect(d.assess(6, h).fires).toBe(true); // z 3.13
    expect(d.assess(-100, h).fires).toBe(false); // downward moves are never spikes
  });

  it('relative rise: least-squares slope x (n - 1) over the mean', () => {
    // y = 2 + 0.5 i, i = 0..4: the fit is exact; rise 0.5 x 4 = 2 over mean 3
    expect(relativeRise([2, 2.5, 3, 3.5, 4])).toBeCloseTo(2 / 3, 12);
    // 1, 3, 2: slope Σ(i-1)(y-2) / Σ(i-1)² = (1 + 0) / 2 = 0.5; rise 1 over mean 2
    expect(relativeRise([1, 3, 2])).toBeCloseTo(0.5, 12);
  });

  it('divergence: above factor x the running minimum, or rising over the window', () => {
    const flat = new DivergenceDetector({ factor: 2, window: 4, rise: 0, minSamples: 3 });
    const h = history([3, 1.5, 2, 2.5]);
    expect(flat.assess(3, h)).toMatchObject({ score: 2, fires: false });
    expect(flat.assess(3.01, h).fires).toBe(true);
    const trend = new DivergenceDetector({ factor: 10, window: 4, rise: 0.5, minSamples: 3 });
    // window 1.5, 2, 2.5, x=3: rise 1.5 over mean 2.25 = 0.667 > 0.5
    expect(trend.assess(3, h)).toMatchObject({ fires: true });
    expect(trend.assess(3, h).rise).toBeCloseTo(1.5 / 2.25, 12);
    expect(trend.assess(1.6, h).fires).toBe(false);
  });

  it('history: a rollback forgets the steps it undoes', () => {
    const h = history([5, 4, 3, 2, 1]);
    h.truncate(3);
    expect(h.last(10)).toEqual([5, 4, 3]);
    expect(h.min()).toBe(3);
    expect(() => h.accept(1, 0)).toThrow(/steps must grow/);
  });
});

describe('bad options', () => {
  it('are NcclNodeErrors naming what was expected and what came', () => {
    const bad = (o: ConstructorParameters<typeof LossHealth>[0], re: RegExp) => {
      let err: unknown;
      try { new LossHealth(o); } catch (e) { err = e; }
      expect(err).toMatchObject({ name: 'NcclNodeError', code: 'ERR_INVALID_ARGUMENT' });
      expect((err as Error).message).toMatch(re);
    };
    bad({ spike: { threshold: -1 } }, /spike.threshold must be a positive number, received -1/);
    bad({ spike: { window: 2.5 } }, /spike.window must be a positive integer, received 2.5/);
    bad({ divergence: { factor: 1 } }, /divergence.factor must be > 1, received 1/);
    bad({ nonfinite: { action: 'ignore' as 'skip' } }, /nonfinite.action must be skip, rollback, scale-lr or stop, received ignore/);
    bad({ lrFactor: 0 }, /lrFactor must be > 0, received 0/);
    bad({ maxRollbacks: -1 }, /maxRollbacks must be a non-negative integer, received -1/);
  });
});

describe('the collective decision', () => {
  /** A communicator whose other ranks propose what `peers` say. */
  const comm = (peers: object[]) => ({ rank: 0, allGatherObject: async <T>(v: T) => [v, ...peers] as T[] });
  const check = (h: LossHealth, step: number, loss: number, peers: object[] = [], grad = 0) =>
    h.check({ step, loss, gradSumSquares: async () => grad, comm: comm(peers), optimizer: new AdamW({ lr: 1, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0 }), globalBatch: 8 });

  it("a NaN gradient on another rank makes this rank skip too, and names that rank", async () => {
    const h = new LossHealth({ spike: false, divergence: false });
    expect(await check(h, 0, 2.5, [{ kind: 'nonfinite', action: 'skip', score: 'NaN', grad: true }])).toBe('skip');
    expect(h.events).toMatchObject([{ step: 0, kind: 'nonfinite', action: 'skip', ranks: [1], data: { from: 0, to: 0, samples: [0, 8] } }]);
    expect(await check(h, 1, 2.5, [{ kind: null, action: 'none', score: 'NaN', grad: false }])).toBe('apply');
  });

  it('the most severe proposal wins; scale-lr scales the rate and still applies', async () => {
    const opt = new AdamW({ lr: 0.1, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0 });
    const h = new LossHealth({ spike: { window: 4, threshold: 3, minSamples: 3, action: 'scale-lr' }, divergence: false, lrFactor: 0.25 });
    for (let s = 0; s < 4; s++) await h.check({ step: s, loss: 3 - 0.1 * s, gradSumSquares: async () => 1, comm: comm([{ kind: null, action: 'none', score: 'NaN', grad: false }]), optimizer: opt, globalBatch: 8 });
    const v = await h.check({ step: 4, loss: 9, gradSumSquares: async () => 1, comm: comm([{ kind: 'spike', action: 'scale-lr', score: '50', grad: false }]), optimizer: opt, globalBatch: 8 });
    expect(v).toBe('apply');
    expect(opt.o.lr).toBeCloseTo(0.025, 15);
    await expect(check(new LossHealth({ nonfinite: { action: 'stop' } }), 7, NaN)).rejects.toBeInstanceOf(LossHealthError);
  });
});

describe('2-rank Gloo TinyLM', () => {
  const base = { steps: 10, globalBatch: 8 };

  it("a NaN in one rank's reduced gradient: both ranks skip that step; parameters equal a run that never had the batch", async () => {
    const k = 4;
    const logDir = mkdtempSync(join(tmpdir(), 'nccl-node-health-'));
    dirs.push(logDir);
    const nan = { ...base, logDir, health: { spike: false, divergence: false }, faults: [{ site: 'collective', rank: 1, step: k, index: 17, value: 'NaN' }] };
    const [a, ref] = [await run(nan), await run({ ...base, steps: base.steps - 1, order: [0, 1, 2, 3, 5, 6, 7, 8, 9] })];
    for (const r of a) expect(r.events).toMatchObject([{ step: k, kind: 'nonfinite', action: 'skip', ranks: [1], data: { from: k, to: k, samples: [k * 8, (k + 1) * 8] } }]);
    expect(a[0]!.events).toHaveLength(1);
    expect(Float32Array.from(a[1]!.params)).toEqual(Float32Array.from(a[0]!.params)); // lockstep: the same steps applied everywhere
    expect(Float32Array.from(a[0]!.params)).toEqual(Float32Array.from(ref[0]!.params));
    expect(a[0]!.params.every(Number.isFinite)).toBe(true);
    // The event in both ranks' logs and registries.
    for (const r of [0, 1]) {
      const lines = readFileSync(join(logDir, `rank-${r}.jsonl`), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(lines.filter((l) => l.event === 'loss_health')).toMatchObject([{ step: k, kind: 'nonfinite', action: 'skip', ranks: [1], data_from: k, data_to: k, samples: [32, 40] }]);
      expect((a[r] as unknown as { prom: { name: string; values: unknown[] }[] }).prom).toMatchObject([{ name: 'nccl_node_loss_health_events_total', values: [{ value: 1, labels: { kind: 'nonfinite', action: 'skip' } }] }]);
    }
  }, 60_000);

  it('the same under FSDP stage 2: a NaN in one rank\'s reduce-scatter result (its gradient shard only)', async () => {
    const k = 3;
    const fsdp = { ...base, parallel: 'fsdp', stage: 2 };
    const a = await run({ ...fsdp, health: { spike: false, divergence: false }, faults: [{ site: 'collective', rank: 0, step: k, index: 5, value: 'NaN' }] });
    const ref = await run({ ...fsdp, steps: base.steps - 1, order: [0, 1, 2, 4, 5, 6, 7, 8, 9] });
    for (const r of a) expect(r.events).toMatchObject([{ step: k, kind: 'nonfinite', action: 'skip', ranks: [0] }]);
    expect(Float32Array.from(a[1]!.params)).toEqual(Float32Array.from(ref[0]!.params));
  }, 60_000);

  it('a loss spike (one batch re-tokenised) fires the z-score detector at that step only', async () => {
    const k = 12;
    const [a] = await run({ steps: 16, globalBatch: 8, spike: [k], health: { spike: { window: 8, threshold: 4 }, divergence: false } });
    expect(a!.events.map((e) => [e.step, e.kind, e.action])).toEqual([[k, 'spike', 'skip']]);
    expect(Number(a!.events[0]!.score)).toBeGreaterThan(4);
    // The same run without the spike: no event at all.
    const [clean] = await run({ steps: 16, globalBatch: 8, health: { spike: { window: 8, threshold: 4 }, divergence: false } });
    expect(clean!.events).toEqual([]);
  }, 60_000);

  it('on the GPU runtime (NCCL stand-ins): the same spike, the same skip, the same parameters as the host run', async () => {
    const payload = { steps: 16, globalBatch: 8, spike: [12], health: { spike: { window: 8, threshold: 4 }, divergence: false } };
    const [dev, host] = [await run({ ...payload, device: true }), await run(payload)];
    expect(dev[0]!.events).toEqual(host[0]!.events);
    expect(dev[0]!.events.map((e) => e.step)).toEqual([12]);
    expect(Float32Array.from(dev[0]!.params)).toEqual(Float32Array.from(host[0]!.params));
  }, 60_000);

  it("divergence with 'stop': every rank ends training with LossHealthError at the same step", async () => {
    const out = await run({ steps: 12, lr: 3, health: { spike: false, divergence: { factor: 1.5, window: 4, rise: 0, action: 'stop' } } });
    const [a, b] = out.map((r) => (r as unknown as { stopped: { code: string; message: string; event: { step: number; kind: string; score: number } } }).stopped);
    expect(a).toEqual(b);
    expect(a).toMatchObject({ code: 'ERR_UNAVAILABLE', event: { kind: 'divergence', action: 'stop' } });
    expect(a!.message).toMatch(/loss health stopped training at step \d+: divergence/);
    expect(a!.event.score).toBeGreaterThan(1.5);
  }, 60_000);

  it('rollback restores the checkpoint before the range and skips it: parameters equal a run that never saw the range', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'nccl-node-health-'));
    dirs.push(dir);
    const k = 10;
    const [a] = await run({
      steps: 14, globalBatch: 8, spike: [k], ckpt: { dir, at: [4, 8] },
      health: { spike: { window: 8, threshold: 4, action: 'rollback' }, divergence: false, rollbackSkip: 1 },
    });
    expect(a!.events).toMatchObject([{ step: k, kind: 'spike', action: 'rollback', data: { from: k - 1, to: k } }]);
    const order = [0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13];
    const [ref] = await run({ steps: order.length, globalBatch: 8, order });
    expect(Float32Array.from(a!.params)).toEqual(Float32Array.from(ref!.params));
    // Steps 0..10 ran (10: the spike), then 8 again after the rollback to the checkpoint of step 8, then 11..13.
    expect(a!.losses.length).toBe(11 + 1 + 3);
  }, 90_000);
});
