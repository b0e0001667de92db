/**
 * TrainMetrics: the training loop's metrics (StepMetrics) for one rank. Each step it
 * times the phases the loop marks, reads the communicator's collective totals, the
 * process and device memory, and then writes the step three ways: the Prometheus
 * registry (served on port + LOCAL_RANK), one JSON line in <logDir>/rank-<R>.jsonl
 * (pino), and the in-memory list summary() reduces at the end.
 */
import { mkdirSync } from 'node:fs';
import type { Server } from 'node:http';
import { join } from 'node:path';
import { pino, type Logger } from 'pino';
import type { SaveHandle } from '../checkpoint/save.js';
import type { TinyLMConfig } from '../models/tiny-lm/tiny-lm.js';
import type { ModelHooks } from '../runtime/types.js';
import { collectiveTotals, type CollectiveTotals } from './collectives.js';
import { mfu, modelFlops, type PeakFlops } from './flops.js';
import { serveMetrics, trainRegistry, type TrainRegistry } from './prometheus.js';
import { PHASES, type Phase, type StepMetrics, type StepRecord } from './types.js';
import type { StragglerMonitor } from './straggler-monitor.js';
import type { StragglerVerdict } from './stragglers.js';

export interface TrainMetricsOptions {
  rank: number;
  localRank?: number;
  worldSize: number;
  model: Pick<TinyLMConfig, 'vocab' | 'dim' | 'hidden' | 'layers'>;
  /** The peak of this rank's device (flops.ts); null: MFU is not reported. */
  peak: PeakFlops | null;
  /** Serve the registry on port + localRank (0: any free port). */
  port?: number;
  host?: string;
  /** Write <logDir>/rank-<rank>.jsonl. */
  logDir?: string;
  /** Bytes in use on this rank's GPU, sampled at most once a second (e.g. NVML's memory.used). */
  deviceMemory?: () => Promise<number | null>;
  /** Scores stragglers from every step (StragglerMonitor.create(comm)); close() closes it. */
  stragglers?: StragglerMonitor;
}

/** One finished step as this rank saw it; times in seconds. */
export interface StepSample {
  step: number;
  loss: number;
  gradNorm: number;
  tokens: number;
  seconds: number;
  phases: Record<Phase, number>;
  tokensPerSecond: number;
  mfu: number | null;
  rssBytes: number;
  deviceMemoryBytes: number | null;
}

export interface CheckpointSample {
  step: number;
  bytes: number;
  saveCallSeconds: number;
  snapshotSeconds: number;
  commitSeconds: number;
}

export class TrainMetrics implements StepMetrics {
  readonly samples: StepSample[] = [];
  readonly checkpoints: CheckpointSample[] = [];
  readonly prom: TrainRegistry;
  readonly flopsPerToken: number;
  readonly logger: Logger | null;
  /** The endpoint this rank serves, when it serves one. */
  url: string | null = null;
  #server: Server | null = null;
  #scrapes: () => number = () => 0;
  #step = -1;
  #phase: Phase = 'data';
  #since = 0;
  #t0 = 0;
  #acc = zeroPhases();
  #coll: Record<string, CollectiveTotals> = {};
  #device: number | null = null;
  #deviceAt = -Infinity;
  #pendingCkpt = new Set<Promise<void>>();

  private constructor(readonly options: TrainMetricsOptions) {
    const { rank, worldSize } = options;
    this.prom = trainRegistry({ rank: String(rank) });
    this.flopsPerToken = modelFlops(options.model).perToken;
    this.prom.flopsPerToken.set(this.flopsPerToken);
    // No verdict yet (or no monitor): no state is 1, no culprit.
    this.prom.stragglerCulprit.set(-1);
    for (const state of STRAGGLER_STATES) this.prom.stragglerState.set({ state }, 0);
    options.stragglers?.onVerdict((v) => this.#straggler(v));
    if (options.peak) this.prom.peakFlops.set({ device: options.peak.device, precision: options.peak.precision, source: options.peak.source }, options.peak.flops);
    if (options.logDir) {
      mkdirSync(options.logDir, { recursive: true });
      // Synchronous writes: every line is on disk when the step returns, even if the process is killed next.
      const dest = pino.destination({ dest: join(options.logDir, `rank-${rank}.jsonl`), sync: true });
      this.logger = pino({ base: { rank, local_rank: options.localRank ?? rank, world_size: worldSize } }, dest);
    } else this.logger = null;
  }

  static async create(options: TrainMetricsOptions): Promise<TrainMetrics> {
    const m = new TrainMetrics(options);
    if (options.port !== undefined) {
      const { server, url, scrapes } = await serveMetrics(m.prom.registry, options.port === 0 ? 0 : options.port + (options.localRank ?? 0), options.host);
      m.#server = server;
      m.#scrapes = scrapes;
      m.url = url;
    }
    m.logger?.info({ event: 'start', step: 0, flops_per_token: m.flopsPerToken, peak_flops: options.peak?.flops ?? null,
      peak_source: options.peak?.source ?? null, peak_device: options.peak?.device ?? null, metrics_url: m.url }, 'start');
    return m;
  }

  begin(step: number): void {
    this.#step = step;
    this.#acc = zeroPhases();
    this.#phase = 'data';
    this.#t0 = this.#since = performance.now();
  }

  phase(phase: Phase): void {
    const now = performance.now();
    this.#acc[this.#phase] += now - this.#since;
    this.#phase = phase;
    this.#since = now;
  }

  hooks<H extends object>(hooks: H): H {
    const h = hooks as ModelHooks<unknown>;
    const out: ModelHooks<unknown> = {};
    if (h.beforeForward) out.beforeForward = (u) => this.#wait(h.beforeForward!(u));
    if (h.beforeBackward) out.beforeBackward = (u) => this.#wait(h.beforeBackward!(u));
    if (h.afterForward) out.afterForward = (u) => h.afterForward!(u);
    if (h.afterBackward) out.afterBackward = (u) => h.afterBackward!(u);
    if (h.gradReady) out.gradReady = (p) => h.gradReady!(p);
    return out as H;
  }

  /** A hook's promise is communication the model waits for (a gather): comm until it settles. */
  #wait(r: Promise<void> | void): Promise<void> | void {
    if (!r || typeof (r as Promise<void>).then !== 'function') return r;
    const back = this.#phase;
    this.phase('comm');
    return (r as Promise<void>).then(() => this.phase(back));
  }

  checkpoint(handle: SaveHandle): void {
    const t0 = performance.now();
    let snapshotSeconds = NaN;
    const p = handle.snapshotted
      .then(() => { snapshotSeconds = (performance.now() - t0) / 1000; })
      .then(() => handle.committed)
      .then((info) => {
        const c: CheckpointSample = { step: handle.step, bytes: info.bytes, saveCallSeconds: handle.stallMs / 1000, snapshotSeconds, commitSeconds: info.seconds };
        this.checkpoints.push(c);
        this.prom.checkpoints.inc();
        this.prom.ckptBytes.set(c.bytes);
        this.prom.ckptStall.set(c.saveCallSeconds);
        this.prom.ckptSnapshot.set(c.snapshotSeconds);
        this.prom.ckptCommit.set(c.commitSeconds);
        this.logger?.info({ event: 'checkpoint', step: c.step, bytes: c.bytes, save_call_seconds: c.saveCallSeconds,
          snapshot_seconds: c.snapshotSeconds, commit_seconds: c.commitSeconds, dir: info.dir }, 'checkpoint');
      })
      .catch((err: Error) => this.logger?.error({ event: 'checkpoint_failed', step: handle.step, error: err.message }, 'checkpoint failed'))
      .finally(() => this.#pendingCkpt.delete(p));
    this.#pendingCkpt.add(p);
  }

  end(r: StepRecord): void {
    this.phase(this.#phase);
    const now = this.#since;
    const seconds = (now - this.#t0) / 1000;
    const phases = Object.fromEntries(PHASES.map((k) => [k, this.#acc[k] / 1000])) as Record<Phase, number>;
    const tokensPerSecond = r.tokens / seconds;
    const peak = this.options.peak;
    const u = peak ? mfu({ tokens: r.tokens, seconds, flopsPerToken: this.flopsPerToken, peakFlops: peak.flops }) : null;
    const rssBytes = process.memoryUsage.rss();
    this.#sampleDevice(now);
    const s: StepSample = { step: r.step, loss: r.loss, gradNorm: r.gradNorm, tokens: r.tokens, seconds, phases, tokensPerSecond, mfu: u, rssBytes, deviceMemoryBytes: this.#device };
    this.samples.push(s);
    this.options.stragglers?.endStep(r.step, seconds);

    const p = this.prom;
    p.step.set(r.step + 1);
    p.loss.set(r.loss);
    p.gradNorm.set(r.gradNorm);
    p.tokens.inc(r.tokens);
    p.tokensPerSecond.set(tokensPerSecond);
    if (u !== null) p.mfu.set(u);
    p.stepSeconds.set(seconds);
    p.stepDuration.observe(seconds);
    for (const k of PHASES) {
      p.phaseSeconds.set({ phase: k }, phases[k]);
      p.phaseTotal.inc({ phase: k }, phases[k]);
    }
    this.#collectives();
    p.rss.set(rssBytes);
    if (this.#device !== null) p.deviceMemory.set(this.#device);
    if (r.memory) {
      const m = r.memory;
      for (const [kind, v] of [['params', m.params], ['grads', m.grads], ['optimizer', m.optimizer], ['peak_transient', m.peakTransient]] as const) p.runtimeMemory.set({ kind }, v);
    }
    this.logger?.info({
      event: 'step', step: r.step, loss: r.loss, grad_norm: Number.isFinite(r.gradNorm) ? r.gradNorm : null, tokens: r.tokens,
      step_seconds: seconds, data_seconds: phases.data, compute_seconds: phases.compute, comm_seconds: phases.comm,
      checkpoint_seconds: phases.checkpoint, tokens_per_second: tokensPerSecond, mfu: u, rss_bytes: rssBytes,
      device_memory_bytes: this.#device,
    }, 'step');
  }

  /** This rank's row of a new straggler verdict, and the job's culprit. */
  #straggler(v: StragglerVerdict): void {
    const me = v.ranks[this.options.rank];
    const p = this.prom;
    p.stragglerCulprit.set(v.culprit ?? -1);
    if (!me) return;
    p.stragglerScore.set(me.score);
    p.stragglerLateness.set(me.latenessSeconds);
    p.stragglerWait.set(me.waitSeconds);
    p.stragglerLateSteps.set(me.lateSteps);
    const state = me.pattern ?? me.role;
    for (const k of STRAGGLER_STATES) p.stragglerState.set({ state: k }, k === state ? 1 : 0);
  }

  /** Counter increments since the last step, from the process-wide collective totals. */
  #collectives(): void {
    const now = collectiveTotals();
    for (const [kind, t] of Object.entries(now)) {
      const before = this.#coll[kind] ?? { calls: 0, bytes: 0, seconds: 0 };
      this.prom.collCalls.inc({ kind }, t.calls - before.calls);
      this.prom.collBytes.inc({ kind }, t.bytes - before.bytes);
      this.prom.collSeconds.inc({ kind }, t.seconds - before.seconds);
      if (t.seconds > 0) this.prom.collBandwidth.set({ kind }, t.bytes / t.seconds);
    }
    this.#coll = now;
  }

  #sampleDevice(now: number): void {
    const f = this.options.deviceMemory;
    if (!f || now - this.#deviceAt < 1000) return;
    this.#deviceAt = now;
    f().then((b) => { this.#device = b; }, () => { this.#device = null; });
  }

  /** GET /metrics requests served so far. */
  get scrapes(): number {
    return this.#scrapes();
  }

  /** Collective totals as of the last step. */
  get collectives(): Record<string, CollectiveTotals> {
    return this.#coll;
  }

  /** Resolves once every checkpoint handed to checkpoint() is recorded (committed or failed) and every step is straggler-scored. */
  async settle(): Promise<void> {
    while (this.#pendingCkpt.size) await Promise.all([...this.#pendingCkpt]);
    await this.options.stragglers?.settle();
  }

  /** Waits for the outstanding checkpoint records, closes the straggler monitor, stops serving and flushes the log. */
  async close(): Promise<void> {
    await this.settle();
    await this.options.stragglers?.close();
    const server = this.#server;
    this.#server = null;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
    this.logger?.flush();
  }
}

const STRAGGLER_STATES = ['chronic', 'intermittent', 'one-off', 'victim', 'ok'] as const;

function zeroPhases(): Record<Phase, number> {
  return { data: 0, compute: 0, comm: 0, checkpoint: 0 };
}
