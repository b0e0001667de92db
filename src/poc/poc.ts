/**
 * `nccl-node poc`: the lab's proof-of-concept playbook in one command. Each gang
 * stage (connectivity, pretrain, checkpoint restore, finetune) runs as fresh rank
 * processes under the project's launcher (src/launch, as `nccl-node run`), each
 * writing its StageResult into DIR; inference and the canary run here, in one
 * process; then the report (report.json/md/html) gathers every gate. A budget in
 * core-hours (GPU-hours on NCCL) stops the run cleanly once crossed.
 */
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { Launcher } from '../launch/launcher.js';
import { BUDGET_EXCEEDED, Budget } from './budget.js';
import { pretrainSteps, type PocConfig } from './config.js';
import { modelConfig, paths, problemsOf } from './corpus.js';
import { gate, writeReport, type Gate, type WrittenReport } from './report.js';
import { inferenceStage } from './inference.js';
import { GANG_STAGES, type GangStage } from './run-stage.js';
import type { StageName, StageResult } from './stage.js';
import type { Problem } from './tasks.js';
import { CompactVocab } from './vocab.js';

export interface PocOptions {
  out: string;
  cfg: PocConfig;
  nprocPerNode: number;
  backend: 'gloo' | 'nccl';
  /** Environment of the ranks (default process.env). */
  env?: NodeJS.ProcessEnv;
  log?: (line: string) => void;
  /** Run only these stages (the others are skipped, as are stages that need a skipped one). */
  only?: readonly StageName[];
}

const require = createRequire(import.meta.url);
const here = fileURLToPath(import.meta.url);
/** The rank program, beside this file (rank.ts from sources, rank.js from dist). */
export const RANK_SCRIPT = here.replace(/poc\.(ts|js)$/, 'rank.$1');

/** A stage that did not run, with why (its one gate is 'skipped'). */
export function skipped(stage: StageName, why: string): StageResult {
  return { stage, gates: [gate({ stage, name: 'stage ran', measured: null, threshold: 1, kind: 'min', unit: 'bool', note: why })], metrics: { skipped: why }, plots: [], seconds: 0 };
}

/** A stage that crashed: one failing gate saying how. */
export function crashed(stage: StageName, why: string, seconds: number): StageResult {
  return { stage, gates: [gate({ stage, name: 'stage completed', measured: 0, threshold: 1, kind: 'min', unit: 'bool', note: why })], metrics: { error: why }, plots: [], seconds };
}

async function readResult(out: string, stage: string): Promise<StageResult | null> {
  try {
    return JSON.parse(await readFile(paths(out).stage(stage), 'utf8')) as StageResult;
  } catch {
    return null;
  }
}

/** One gang of fresh rank processes running `stage`; resolves to its result and wall seconds. */
async function runGang(o: PocOptions, stage: GangStage): Promise<{ result: StageResult; wall: number }> {
  const t0 = performance.now();
  const launcher = await Launcher.start({
    script: RANK_SCRIPT,
    scriptArgs: [stage, '--out', o.out, '--config', paths(o.out).config, '--backend', o.backend],
    nprocPerNode: o.nprocPerNode,
    masterPort: 0,
    env: o.env ?? process.env,
  });
  // Ctrl-C stops the gang's ranks too, not only this process.
  const signals = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
  const stop = (sig: NodeJS.Signals) => launcher.interrupt(sig);
  for (const sig of signals) process.on(sig, stop);
  const done = await launcher.done.finally(() => signals.forEach((sig) => process.off(sig, stop)));
  const wall = (performance.now() - t0) / 1000;
  const result = done.exitCode === 0 ? await readResult(o.out, stage) : null;
  return { result: result ?? crashed(stage, done.exitCode === 0 ? `no ${paths(o.out).stage(stage)} written` : done.message, wall), wall };
}

const passed = (r: StageResult | undefined) => !!r && r.gates.length > 0 && r.gates.every((g) => g.verdict !== 'skipped') && !r.gates.some((g) => g.name === 'stage completed');

/** Every stage in order, then the report. */
export async function runPoc(o: PocOptions): Promise<{ report: WrittenReport; results: StageResult[] }> {
  const log = o.log ?? ((l: string) => process.stdout.write(`${l}\n`));
  const startedAt = new Date().toISOString();
  // A rerun into the same DIR starts clean: the corpus, vocabulary and checkpoints of an
  // earlier run (perhaps with other knobs) must not leak into this one. Only what the POC writes is removed.
  const p = paths(o.out);
  await Promise.all([join(o.out, 'data'), join(o.out, 'ckpt'), p.vocab, p.config, ...[...GANG_STAGES].map(p.stage)].map((f) => rm(f, { recursive: true, force: true })));
  await mkdir(o.out, { recursive: true });
  await writeFile(paths(o.out).config, `${JSON.stringify(o.cfg, null, 2)}\n`);
  const budget = new Budget(o.cfg.budget.coreHours, o.cfg.budget.price, o.backend === 'nccl' ? 'GPU-hours' : 'core-hours');
  const results = new Map<StageName, StageResult>();
  const blocked = blocker(results, budget);

  for (const stage of GANG_STAGES) {
    const why = (o.only && !o.only.includes(stage) ? 'not selected (--stages)' : null) ?? blocked(stage);
    if (why) {
      results.set(stage, skipped(stage, why));
      continue;
    }
    log(`== ${stage}: ${o.nprocPerNode} ranks on ${o.backend}`);
    const { result, wall } = await runGang(o, stage);
    budget.add(stage, wall, o.nprocPerNode);
    results.set(stage, result);
    for (const g of result.gates) log(`   ${g.verdict.toUpperCase().padEnd(7)} ${g.name}${g.note ? ` (${g.note})` : ''}`);
  }

  const all = await finishStages(o.out, o.cfg, [...results.values()], budget, log, o.only);
  const report = await assemble(o.out, o.cfg, all, { startedAt, nprocPerNode: o.nprocPerNode, backend: o.backend });
  return { report, results: all };
}

/** Which stage needs which: a stage whose prerequisite did not complete is skipped. */
const NEEDS: Partial<Record<StageName, StageName>> = { checkpoint: 'pretrain', finetune: 'pretrain', inference: 'finetune', canary: 'finetune' };

function blocker(results: Map<StageName, StageResult>, budget: Budget): (s: StageName) => string | null {
  return (s) => {
    if (budget.exceeded) return BUDGET_EXCEEDED;
    const dep = NEEDS[s];
    return dep && !passed(results.get(dep)) ? `needs the ${dep} stage, which did not complete` : null;
  };
}

/** After the gang stages: inference and canary here, then the budget's account. */
export async function finishStages(out: string, cfg: PocConfig, gangs: StageResult[], budget: Budget,
  log: (l: string) => void = (l) => process.stdout.write(`${l}\n`), only?: readonly StageName[]): Promise<StageResult[]> {
  const results = new Map(gangs.map((r) => [r.stage, r]));
  const block = blocker(results, budget);
  const inf = await serveStages(out, cfg, results, (s) => (only && !only.includes(s) ? 'not selected (--stages)' : block(s)), log);
  if (inf.wall > 0) budget.add('inference', inf.wall, cfg.inference.workers);
  for (const r of inf.results) results.set(r.stage, r);
  results.set('budget', budget.result());
  return [...results.values()];
}

/** Inference and canary, in this process: finetuned checkpoint as the candidate, pretrained as the baseline. */
async function serveStages(out: string, cfg: PocConfig, results: Map<StageName, StageResult>, blocked: (s: StageName) => string | null, log: (l: string) => void): Promise<{ results: StageResult[]; wall: number }> {
  const why = blocked('inference');
  if (why) return { results: [skipped('inference', why), skipped('canary', why)], wall: 0 };
  const t0 = performance.now();
  try {
    const pre = results.get('pretrain')!.metrics as { steps: number; checkpoints: { step: number; dir: string }[] };
    const candidate = String(results.get('finetune')!.metrics.checkpoint);
    const baseline = pre.checkpoints.find((c) => c.step === pre.steps)!.dir;
    const vocab = await CompactVocab.read(paths(out).vocab);
    const c = cfg.inference;
    log(`== inference and canary: ${c.workers} workers, ${c.requests} requests at ${c.rate}/s`);
    const [inference, canary] = await inferenceStage({
      candidate, baseline, model: modelConfig(cfg, vocab), vocabPath: paths(out).vocab, problems: problemsOf(cfg).heldOut,
      workers: c.workers, rate: c.rate, requests: c.requests, minSamples: c.minSamples, slo: { p95Ms: c.p95Ms, p99Ms: c.p99Ms }, maxTokens: c.maxTokens, minAccuracy: c.minAccuracy, seed: cfg.seed,
      log: (l) => log(`[inference] ${l}`),
    });
    return { results: [inference, canary], wall: (performance.now() - t0) / 1000 };
  } catch (err) {
    const wall = (performance.now() - t0) / 1000;
    const msg = (err as Error).message;
    return { results: [crashed('inference', msg, wall), skipped('canary', `inference failed: ${msg}`)], wall };
  }
}

function versions(results: StageResult[]): Record<string, unknown> {
  const conn = results.find((r) => r.stage === 'connectivity')?.metrics as { ranks?: { backendVersion: string }[] } | undefined;
  const v = (p: string) => {
    try {
      return (require(p) as { version: string }).version;
    } catch {
      return null;
    }
  };
  return { ncclNode: v('../../package.json'), gptTokenizer: v('gpt-tokenizer/package.json'), backend: conn?.ranks?.[0]?.backendVersion ?? null, node: process.version };
}

/** The report from the stages' results (also `nccl-node poc finish` after stages run under another launcher). */
export async function assemble(out: string, cfg: PocConfig, results: StageResult[], run: { startedAt: string; nprocPerNode?: number; backend?: string }): Promise<WrittenReport> {
  const gates: Gate[] = results.flatMap((r) => r.gates);
  const budget = results.find((r) => r.stage === 'budget');
  return writeReport(out, {
    title: `nccl-node POC, ${cfg.model.kind}${run.backend ? ` (${run.nprocPerNode ?? '?'} ranks, ${run.backend})` : ''}`,
    startedAt: run.startedAt,
    finishedAt: new Date().toISOString(),
    gates,
    metrics: {
      verdictReason: budget?.metrics.exceeded ? BUDGET_EXCEEDED : undefined,
      /** The model every stage trained and served (config.model has its sizes). */
      model: cfg.model.kind,
      config: cfg, pretrainSteps: pretrainSteps(cfg), versions: versions(results),
      stages: Object.fromEntries(results.map((r) => [r.stage, { seconds: r.seconds, ...r.metrics }])),
    },
    plots: results.flatMap((r) => r.plots),
  });
}

/** The gate table as plain text lines. */
export function gateTable(gates: readonly Gate[]): string[] {
  const fmt = (v: number | null) => (v === null ? '-' : Number(v.toPrecision(4)).toString());
  const rows = gates.map((g) => [g.stage, g.name, fmt(g.measured), `${g.kind === 'min' ? '>=' : '<='} ${fmt(g.threshold)} ${g.unit}`, g.verdict.toUpperCase()]);
  const w = [0, 1, 2, 3, 4].map((i) => Math.max(...[['stage', 'gate', 'measured', 'bound', 'verdict'][i]!.length, ...rows.map((r) => r[i]!.length)]));
  const line = (r: string[]) => r.map((c, i) => c.padEnd(w[i]!)).join('  ');
  return [line(['stage', 'gate', 'measured', 'bound', 'verdict']), ...rows.map(line)];
}
