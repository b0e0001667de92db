/**
 * The common driver (nccl-tests' TimeTest/BenchTime/CheckData): warm-up over
 * every size, the timed loop for out-of-place then in-place, validation passes,
 * and one table row per size. Only rank 0 prints; every rank runs the same steps.
 */
import type { Buffer, Communicator } from '../comm/communicator.js';
import { DTYPE_BYTES } from '../dtypes.js';
import type { BenchDevice, CollArgs, CollCounts, Collective, Slab } from './collective.js';
import type { BenchConfig, OpChoice, TypeChoice } from './config.js';
import { perIterBody, rowBody, rowPreamble, timestamp, type IterStatsUs, type Measurement } from './text-format.js';

/**
 * Small host-side exchanges between ranks (times, error counts). They span every
 * rank of the job, also when NCCL_TESTS_SPLIT runs the test in smaller groups.
 */
export interface Control {
  /** Ranks taking part (the world size): -a 1 averages over them. */
  size: number;
  /** This process's place among them: its row in -I's per-process times. */
  rank: number;
  allReduce(values: number[], op: 'sum' | 'min' | 'max'): Promise<number[]>;
  /** Rank 0's values everywhere (-a 0). */
  fromRank0(values: number[]): Promise<number[]>;
  barrier(): Promise<void>;
}

export interface BenchEnv {
  comm: Communicator;
  dev: BenchDevice;
  control: Control;
  rank: number;
  nranks: number;
  /** Corrupt one element of this rank's results before checking (test hook). */
  corrupt: boolean;
  print(line: string): void;
}

export interface MeasurementRecord extends Measurement {
  perIter?: IterStatsUs & { avg: number; p50: number; p95: number; stdev: number; timesUs: number[]; skipped: number; processTimesUs: number[][] };
}

export interface Row {
  collective: string;
  size: number;
  count: number;
  type: string;
  redop: string;
  root: number;
  outOfPlace: MeasurementRecord;
  inPlace: MeasurementRecord;
}

export interface RunTotals {
  rows: Row[];
  /** Measurements with wrong elements, counted per rank and summed (nccl-tests' errors[0]). */
  errors: number;
  busBwSum: number;
  busBwCount: number;
}

const now = () => performance.now() / 1000;

/**
 * The expected buffer of the untimed pass before the timed loop: that pass only puts
 * valid inputs in place (nccl-tests' initData with rep 99), nothing is compared with
 * its expected result, and making one costs as much as the inputs n times over.
 */
const DISCARD = Object.freeze({ discarded: true }) as unknown as Buffer;
const discardSlab: Slab = { at: () => DISCARD };

/** `dev` with every write into DISCARD dropped (the expected result's writers: prepare*, copy). */
function inputsOnly(dev: BenchDevice): BenchDevice {
  return {
    alloc: (bytes) => dev.alloc(bytes),
    slab: (mem, byteOffset, dtype) => dev.slab(mem, byteOffset, dtype),
    slice: (buf, offset, count) => dev.slice(buf, offset, count),
    zero: (buf) => dev.zero(buf),
    copy: (dst, src) => (dst === DISCARD ? undefined : dev.copy(dst, src)),
    prepareInput: (buf, ...rest) => (buf === DISCARD ? undefined : dev.prepareInput(buf, ...rest)),
    prepareExpected: (buf, ...rest) => (buf === DISCARD ? undefined : dev.prepareExpected(buf, ...rest)),
    countWrong: (a, e, dtype, op) => dev.countWrong(a, e, dtype, op),
    corrupt: (buf) => dev.corrupt(buf),
  };
}

class TimeTest {
  private readonly f;
  private readonly ws: number;
  private counts!: CollCounts;
  private sizeBytes = { send: 0, recv: 0, param: 0 };
  private pending: PromiseLike<unknown>[] = [];
  private rep = 0;

  constructor(
    private readonly env: BenchEnv,
    private readonly cfg: BenchConfig,
    private readonly coll: Collective,
    private readonly mem: { send: unknown; recv: unknown; expected: unknown },
    private readonly type: TypeChoice,
    private readonly op: OpChoice | undefined,
    private readonly root: number,
    private readonly totals: RunTotals,
  ) {
    this.f = cfg.flags;
    this.ws = DTYPE_BYTES[type.dtype];
  }

  private args(inPlace: boolean): CollArgs {
    const e = this.env;
    return { comm: e.comm, dev: e.dev, rank: e.rank, nranks: e.nranks, dtype: this.type.dtype, op: this.op?.op, root: this.root, inPlace, counts: this.counts };
  }

  /** setupArgs: nccl-tests' byte counts for a size. */
  setup(size: number): void {
    this.counts = this.coll.counts(Math.floor(size / this.ws), this.ws, this.env.nranks);
    this.sizeBytes = { send: this.counts.sendCount * this.ws, recv: this.counts.recvCount * this.ws, param: this.counts.paramCount * this.ws };
  }

  private slab(which: 'send' | 'recv' | 'expected', shiftBytes: number): Slab {
    return this.env.dev.slab(this.mem[which], shiftBytes + this.f.unalign * this.ws, this.type.dtype);
  }

  /** startColl: queue one operation; the offset moves each iteration (cache effects). */
  private async start(inPlace: boolean, iter: number): Promise<void> {
    const total = Math.max(this.sizeBytes.send, this.sizeBytes.recv);
    const steps = total ? Math.max(1, Math.floor(this.f.maxbytes / total)) : 1;
    const shift = total * (iter % steps);
    const c = this.counts;
    const recv = this.slab('recv', shift);
    const send = inPlace ? recv.at(c.sendInplaceOffset * this.env.rank, c.sendCount) : this.slab('send', shift).at(0, c.sendCount);
    const work = this.coll.run({ ...this.args(inPlace), send, recv: recv.at(inPlace ? c.recvInplaceOffset * this.env.rank : 0, c.recvCount) });
    if (this.f.blocking) {
      await work;
      if (this.f.blocking === 1) await this.env.control.barrier();
    } else this.pending.push(work);
  }

  /** completeColl: wait for everything queued. */
  private async complete(): Promise<void> {
    const p = this.pending;
    this.pending = [];
    await Promise.all(p);
  }

  async warmup(): Promise<void> {
    for (let size = this.f.minbytes; size <= this.f.maxbytes; size = size ? size * 2 : 1) {
      this.setup(size);
      for (let i = 0; i < this.f.warmup_iters; i++) await this.start(false, i);
      await this.complete();
    }
  }

  /** `inputs`: the inputs only, for the untimed pass before the timed loop. */
  private async initData(inPlace: boolean, rep: number, inputs = false): Promise<void> {
    const a = { ...this.args(inPlace), send: this.slab('send', 0), recv: this.slab('recv', 0), expected: this.slab('expected', 0), rep };
    await this.coll.initData(inputs ? { ...a, dev: inputsOnly(a.dev), expected: discardSlab } : a);
  }

  /** One BenchTime: returns the measurement and prints nothing. */
  async bench(inPlace: boolean): Promise<MeasurementRecord> {
    const f = this.f;
    const e = this.env;
    if (f.check) await this.initData(inPlace, 99, true);
    await this.start(inPlace, 0);
    await this.complete();
    await e.control.barrier();

    const ends: number[] = [];
    const starts: number[] = [];
    let collOnly = 0;
    const t0 = now();
    for (let iter = 0; iter < f.iters; iter++) {
      const ti = now();
      starts.push(ti);
      for (let a = 0; a < f.agg_iters; a++) await this.start(inPlace, iter * f.agg_iters + a);
      if (f.per_iter_timing) {
        const last = this.pending.at(-1) ?? Promise.resolve();
        last.then(() => (ends[iter] = now()), () => {});
        if (f.blocking) ends[iter] = now();
      }
      if (f.blocking === 3) {
        await this.complete();
        collOnly += now() - ti;
        await e.control.barrier();
      }
    }
    const n = Math.max(1, f.iters * f.agg_iters);
    const cputime = (f.blocking === 3 ? collOnly : now() - t0) / n;
    await this.complete();
    let delta = (f.blocking === 3 ? collOnly : now() - t0) / n;
    const mode = f.average;
    if (mode === 0) [delta] = await e.control.fromRank0([delta]) as [number];
    else {
      const [v] = (await e.control.allReduce([delta], mode === 2 ? 'min' : mode === 3 ? 'max' : 'sum')) as [number];
      delta = mode === 1 ? v / e.control.size : v;
    }
    const { algBw, busBw } = this.coll.bw(this.counts.paramCount, this.ws, delta, e.nranks);
    const perIter = f.per_iter_timing ? await this.iterStats(starts, ends, f.blocking === 3) : undefined;
    await e.control.barrier();

    const reportErrors = f.check > 0 && !(inPlace && this.coll.inPlaceUnchecked);
    let wrong = 0;
    this.rep++;
    for (let c = 0; c < f.check; c++) {
      await this.initData(inPlace, this.rep);
      await this.start(inPlace, 0);
      await this.complete();
      const local = await this.checkData(inPlace);
      if (reportErrors && local) this.totals.errors++;
      [wrong] = (await e.control.allReduce([local], 'sum')) as [number];
      if (wrong) break;
    }
    this.totals.busBwSum += busBw;
    this.totals.busBwCount++;
    const timeUs = (f.report_cputime ? cputime : delta) * 1e6;
    return { timeUs, algBw, busBw, wrong: reportErrors ? wrong : undefined, ...(perIter ? { perIter } : {}) };
  }

  private async checkData(inPlace: boolean): Promise<number> {
    const c = this.counts;
    const recv = this.slab('recv', 0).at(inPlace ? c.recvInplaceOffset * this.env.rank : 0, c.recvCount);
    if (this.env.corrupt) await this.env.dev.corrupt(recv);
    const op = this.op?.op ?? 'nil';
    return this.env.dev.countWrong(recv, this.slab('expected', 0).at(0, c.recvCount), this.type.dtype, op);
  }

  /**
   * Per-iteration times as nccl-tests' -I statistics: every process's row (gathered
   * as a sum of rows that are zero except one's own), and their per-iteration max.
   */
  private async iterStats(starts: number[], ends: number[], paired: boolean) {
    const f = this.f;
    const local = starts.map((s, i) => ((ends[i] ?? s) - (paired || i === 0 ? s : (ends[i - 1] ?? s))) / f.agg_iters);
    const { size, rank } = this.env.control;
    const n = local.length;
    const mine = new Array<number>(size * n).fill(0);
    mine.splice(rank * n, n, ...local);
    const all = await this.env.control.allReduce(mine, 'sum');
    const rows = Array.from({ length: size }, (_, r) => all.slice(r * n, (r + 1) * n));
    const times = local.map((_, i) => Math.max(...rows.map((row) => row[i]!)));
    const sorted = times.slice(f.per_iter_skip).sort((a, b) => a - b);
    const k = sorted.length;
    const pct = (p: number) => sorted[Math.min(k - 1, Math.floor((k * p + 99) / 100) - 1)]!;
    const avg = sorted.reduce((a, b) => a + b, 0) / k;
    const stdev = Math.sqrt(sorted.reduce((a, b) => a + (b - avg) ** 2, 0) / k);
    const us = (v: number) => v * 1e6;
    return {
      min: us(sorted[0]!), max: us(sorted[k - 1]!), p99: us(pct(99)), cvPct: avg > 0 ? (stdev / avg) * 100 : 0,
      avg: us(avg), p50: us(sorted[Math.floor(k / 2)]!), p95: us(pct(95)), stdev: us(stdev), timesUs: times.map(us), skipped: f.per_iter_skip,
      processTimesUs: rows.map((row) => row.map(us)),
    };
  }

  /** The size sweep, -N times (0 = forever); one printed row per size. */
  async sweep(): Promise<void> {
    const f = this.f;
    const e = this.env;
    const redop = this.coll.redop === 'op' ? this.op!.name : this.coll.redop === 'none' ? 'none' : '';
    let cycles = f.run_cycles;
    do {
      for (let size = f.minbytes; size <= f.maxbytes; size = f.stepfactor > 1 ? (size ? size * f.stepfactor : 1) : size + Math.max(1, f.stepbytes)) {
        this.setup(size);
        const count = this.counts.paramCount;
        const shown = Math.max(this.sizeBytes.send, this.sizeBytes.recv);
        const oop = await this.bench(false);
        const ip = await this.bench(true);
        let line = rowPreamble(shown, count, this.type.name, redop, this.root) + rowBody(oop);
        if (oop.perIter) line += perIterBody(oop.perIter);
        line += rowBody(ip);
        if (ip.perIter) line += perIterBody(ip.perIter);
        if (f.report_timestamps) line += timestamp();
        e.print(line);
        this.totals.rows.push({ collective: this.coll.name, size: shown, count, type: this.type.name, redop, root: this.root, outOfPlace: oop, inPlace: ip });
      }
    } while (--cycles !== 0);
  }
}

/** Runs one collective over every type, op and root the flags ask for (XxxRunTest). */
export async function runCollective(env: BenchEnv, cfg: BenchConfig, coll: Collective): Promise<RunTotals> {
  const totals: RunTotals = { rows: [], errors: 0, busBwSum: 0, busBwCount: 0 };
  if (coll.powerOfTwo && (env.nranks & (env.nranks - 1)) !== 0) {
    env.print(`nRanks ${env.nranks} is not a power of 2, skipping`);
    return totals;
  }
  const f = cfg.flags;
  const bytes = f.maxbytes + 8 * f.unalign;
  const mem = { send: env.dev.alloc(bytes), recv: env.dev.alloc(bytes), expected: env.dev.alloc(f.check ? bytes : 0) };
  const ops: Array<OpChoice | undefined> = coll.redop === 'op' ? cfg.ops : [undefined];
  const roots = !coll.rooted ? [-1] : f.root === -1 ? [...Array(env.nranks).keys()] : [f.root];
  for (const type of cfg.types) {
    for (const op of ops) {
      for (const root of roots) {
        const t = new TimeTest(env, cfg, coll, mem, type, op, root, totals);
        await env.control.barrier();
        await t.warmup();
        await t.sweep();
      }
    }
  }
  return totals;
}
