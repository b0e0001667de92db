/**
 * Silent data corruption sentinel, a step probe (probe.ts) on the CPU path. Two checks:
 *
 *  - checksum, every `every` steps after the optimizer step: CRC32C (the addon's,
 *    hardware where the CPU has it) of every parameter and optimizer-state tensor,
 *    compared across the replicas that must hold the same bits (DDP: all ranks;
 *    hybrid FSDP: each shard's replicate group). Without replication (plain FSDP) the
 *    gathered full parameters are compared instead, which only catches a corrupted
 *    gather: a flipped bit in a shard nobody else holds has no second copy to differ from.
 *  - replay, every `replayEvery` steps before the optimizer step: each rank r recomputes
 *    rank (r+1) mod N's local gradient (same rows, same parameters, a fresh model) and
 *    the CRCs are compared with the gradients rank r+1 produced in training. This is
 *    what catches a fault in the computation itself: the all-reduce spreads a wrong
 *    gradient to every replica, after which the replicas agree bit for bit.
 *
 * A mismatch names the rank: by majority among three or more replicas (with two, both
 * are named and the event is `ambiguous`); for a replay, the rank whose training
 * gradient differs from its peer's recomputation. Named ranks go to `suspects` (for a
 * launcher to evict), the log and the registry.
 */
import { Counter, Gauge, type Registry } from 'prom-client';
import type { Logger } from 'pino';
import { NcclNodeError } from '../errors.js';
import { TinyLM } from '../models/tiny-lm/tiny-lm.js';
import { rowsOf } from '../models/tiny-lm/synthetic-corpus.js';
import { binding } from '../native.js';
import { DistributedDataParallel } from '../runtime/ddp.js';
import { FullyShardedDataParallel } from '../runtime/fsdp.js';
import type { Optimizer } from '../runtime/optim.js';
import type { ParamLike } from '../runtime/types.js';
import type { StepContext, StepProbe } from './probe.js';

export interface SdcOptions {
  /** Checksum comparison after every this many steps (default 10; 0: never). */
  every?: number;
  /** Replay after every this many steps (default 0: never). */
  replayEvery?: number;
  metrics?: { logger: Logger | null; prom: { registry: Registry } };
}

export interface SdcEvent {
  step: number;
  check: 'checksum' | 'replay';
  /** Global ranks named. */
  suspects: number[];
  /** Two replicas disagree and nothing says which one is right: both are named. */
  ambiguous: boolean;
  /** Tensors (or parameters' gradients) that differed. */
  tensors: string[];
  /** replay: the rank that recomputed the suspect's step. */
  verifier?: number;
}

/** CRC32C of a float32 array's bytes. */
export function crc32cOf(a: Float32Array): number {
  return binding().crc32c(a);
}

/** The host arrays that must be bit-identical across replicas: parameters and optimizer state, by name. */
export function replicaTensors(dp: unknown, optimizer: Optimizer): { params: Array<[string, Float32Array]>; optimizer: Array<[string, Float32Array]> } {
  if (dp instanceof DistributedDataParallel) {
    const opt = optimizer.state(dp.params.map((p) => ({ key: p.name, size: p.size }))).tensors;
    return { params: dp.params.map((p) => [p.name, p.data]), optimizer: Object.entries(opt) };
  }
  if (dp instanceof FullyShardedDataParallel) {
    const opt = optimizer.state(dp.units.map((u, i) => ({ key: `unit${i}`, size: u.shard }))).tensors;
    return { params: dp.units.map((u, i) => [`unit${i}.master`, u.master]), optimizer: Object.entries(opt) };
  }
  throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'SDC sentinel: expected a host DistributedDataParallel or FullyShardedDataParallel (the CPU path)');
}

/**
 * Which ranks disagree with the majority, tensor by tensor. `crcs[r][t]`: rank r's CRC of tensor t.
 * Returns the minority ranks (indices into crcs), the tensors that differed, and
 * whether some tensor had no strict majority (then every rank off the most common value, or all in a tie, is named).
 */
export function outvoted(crcs: readonly (readonly number[])[]): { ranks: number[]; tensors: number[]; ambiguous: boolean } {
  const ranks = new Set<number>(), tensors: number[] = [];
  let ambiguous = false;
  const n = crcs.length;
  for (let t = 0; t < (crcs[0]?.length ?? 0); t++) {
    const votes = new Map<number, number[]>();
    crcs.forEach((c, r) => votes.set(c[t]!, [...(votes.get(c[t]!) ?? []), r]));
    if (votes.size === 1) continue;
    tensors.push(t);
    const groups = [...votes.values()].sort((a, b) => b.length - a.length);
    if (groups[0]!.length * 2 > n) for (const g of groups.slice(1)) for (const r of g) ranks.add(r);
    else {
      ambiguous = true;
      for (const g of groups) for (const r of g) ranks.add(r);
    }
  }
  return { ranks: [...ranks].sort((a, b) => a - b), tensors, ambiguous };
}

export class SdcSentinel implements StepProbe {
  readonly every: number;
  readonly replayEvery: number;
  readonly events: SdcEvent[] = [];
  /** Checks run so far (checksum comparisons, replays). */
  checks = 0;
  replays = 0;
  readonly #suspects = new Set<number>();
  readonly #o: SdcOptions;
  #step = -1;
  /** CRC of each parameter's local gradient as backward left it, on replay steps. */
  #own = new Map<string, number>();
  #replica: TinyLM | null = null;
  readonly #prom: { checks: Counter; mismatches: Counter; suspects: Gauge } | null;

  constructor(o: SdcOptions = {}) {
    this.#o = o;
    this.every = o.every ?? 10;
    this.replayEvery = o.replayEvery ?? 0;
    for (const [k, v] of [['every', this.every], ['replayEvery', this.replayEvery]] as const) {
      if (!Number.isInteger(v) || v < 0) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `SDC sentinel: ${k} must be a non-negative integer, received ${v}`);
    }
    const registry = o.metrics?.prom.registry;
    const one = <M>(name: string, make: () => M): M => (registry!.getSingleMetric(name) as M | undefined) ?? make();
    this.#prom = registry ? {
      checks: one('nccl_node_sdc_checks_total', () => new Counter({ name: 'nccl_node_sdc_checks_total', help: 'SDC checks run, by kind (checksum, replay).', labelNames: ['check'], registers: [registry] })),
      mismatches: one('nccl_node_sdc_mismatches_total', () => new Counter({ name: 'nccl_node_sdc_mismatches_total', help: 'SDC checks that found a mismatch, by kind.', labelNames: ['check'], registers: [registry] })),
      suspects: one('nccl_node_sdc_suspect_ranks', () => new Gauge({ name: 'nccl_node_sdc_suspect_ranks', help: 'Ranks named by an SDC check so far.', registers: [registry] })),
    } : null;
  }

  /** Ranks a check named, ascending: candidates for eviction. */
  get suspects(): number[] {
    return [...this.#suspects].sort((a, b) => a - b);
  }

  #due(step: number, every: number): boolean {
    return every > 0 && (step + 1) % every === 0;
  }

  begin(step: number): void {
    this.#step = step;
    this.#own.clear();
  }

  hooks<H extends object>(hooks: H): H {
    const h = hooks as { gradReady?: (p: ParamLike) => void };
    return {
      ...hooks,
      gradReady: (p: ParamLike) => {
        // Before the runtime sees it: the bucket holding p may be reduced in place from here on.
        if (this.#due(this.#step, this.replayEvery) && p.grad.length === p.size) this.#own.set(p.name, crc32cOf(p.grad));
        h.gradReady?.(p);
      },
    } as H;
  }

  async reduced(ctx: StepContext): Promise<void> {
    if (this.#due(ctx.step, this.replayEvery)) await this.#replay(ctx);
  }

  async stepped(ctx: StepContext): Promise<void> {
    if (this.#due(ctx.step, this.every)) await this.#checksum(ctx);
  }

  async #checksum(ctx: StepContext): Promise<void> {
    const { comm } = ctx;
    this.checks++;
    this.#prom?.checks.inc({ check: 'checksum' });
    let names: string[], group: { rank: number; crcs: number[] }[];
    if (ctx.replicas && ctx.replicas.size > 1) {
      const t = replicaTensors(ctx.dp, ctx.optimizer);
      const mine = [...t.params, ...t.optimizer];
      names = mine.map(([n]) => n);
      group = await ctx.replicas.allGatherObject({ rank: comm.rank, crcs: mine.map(([, a]) => crc32cOf(a)) });
    } else if (ctx.dp instanceof FullyShardedDataParallel && comm.size > 1) {
      const full = await ctx.dp.gatherParams();
      names = ctx.model.params.map((p) => p.name);
      group = await comm.allGatherObject({ rank: comm.rank, crcs: full.map(crc32cOf) });
    } else return;
    const v = outvoted(group.map((g) => g.crcs));
    if (v.ranks.length) this.#report({ step: ctx.step, check: 'checksum', suspects: v.ranks.map((i) => group[i]!.rank), ambiguous: v.ambiguous, tensors: v.tensors.map((t) => names[t]!) });
  }

  async #replay(ctx: StepContext): Promise<void> {
    const { comm, model } = ctx;
    // FSDP stage 3 holds no full parameters between backward and the step: nothing to replay from.
    if (comm.size < 2 || !model.params.every((p) => p.data.length === p.size)) return;
    this.replays++;
    this.#prom?.checks.inc({ check: 'replay' });
    const all = new Int32Array(ctx.rows.length * comm.size);
    await comm.allGather(ctx.rows, all);
    const target = (comm.rank + 1) % comm.size;
    const theirs = all.subarray(target * ctx.rows.length, (target + 1) * ctx.rows.length);
    const replica = (this.#replica ??= new TinyLM(model.cfg));
    replica.params.forEach((p, i) => {
      p.data.set(model.params[i]!.data);
      p.grad.fill(0);
    });
    for (let m = 0; m < ctx.microBatches; m++) {
      await replica.forwardBackward(rowsOf(theirs, model.cfg.seqLen, m * ctx.microRows, ctx.microRows), ctx.microRows, { gradScale: ctx.gradScale });
    }
    const names = model.params.map((p) => p.name);
    const own = names.map((n) => this.#own.get(n) ?? -1);
    const redo = replica.params.map((p) => crc32cOf(p.grad));
    const got = await comm.allGatherObject({ own, redo });
    const n = comm.size;
    // bad[v]: what rank v's recomputation of rank v+1 disagreed on.
    const bad = got.map((g, v) => names.filter((_, i) => g.redo[i] !== got[(v + 1) % n]!.own[i]));
    for (let v = 0; v < n; v++) {
      if (!bad[v]!.length) continue;
      const t = (v + 1) % n;
      // A rank that fails as target and as verifier (wrong parameters, a faulty unit) is the
      // one to name, not its neighbours; an isolated mismatch names the target: its training
      // gradient differs from a recomputation, while its own recomputation was right.
      const culprit = (r: number) => bad[(r - 1 + n) % n]!.length > 0 && bad[r]!.length > 0;
      const suspects = n === 2 && culprit(0) && culprit(1) ? [0, 1] : culprit(v) ? [v] : [t];
      this.#report({ step: ctx.step, check: 'replay', suspects, ambiguous: suspects.length > 1, tensors: bad[v]!.map((x) => `${x}.grad`), verifier: v });
    }
  }

  #report(e: SdcEvent): void {
    this.events.push(e);
    for (const r of e.suspects) this.#suspects.add(r);
    this.#prom?.mismatches.inc({ check: e.check });
    this.#prom?.suspects.set(this.#suspects.size);
    this.#o.metrics?.logger?.error({ event: 'sdc', step: e.step, check: e.check, suspects: e.suspects, ambiguous: e.ambiguous, tensors: e.tensors, verifier: e.verifier ?? null }, 'silent data corruption');
  }
}
