// `nccl-node poc` with model.kind 'gpt': every stage on the GPT (src/models/gpt) at a tiny
// size, end to end through the CLI at 2 ranks on Gloo, checked against what this process
// recomputes independently: the final checkpoint read into a fresh GPT, the finetuned
// checkpoint's held-out exact match decoded here, the GPT's training forward for logits();
// then the mid-run checkpoint moved by one unit in the last place, so the restore gate fails.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { load } from '../../src/checkpoint/index.js';
import { NcclNodeError } from '../../src/errors.js';
import { GPT, type GPTConfig } from '../../src/models/gpt/gpt.js';
import { createModel } from '../../src/models/language-model.js';
import { resolvePocConfig } from '../../src/poc/config.js';
import { problemsOf } from '../../src/poc/corpus.js';
import { exactMatch, loadModel } from '../../src/poc/generate.js';
import { CompactVocab } from '../../src/poc/vocab.js';
import { root } from '../gpu/helpers.js';
import { corruptOneUlp } from './corrupt-ckpt.js';

interface Gate { stage: string; name: string; measured: number | null; threshold: number; verdict: string; note?: string }
interface ReportJson { title: string; verdict: string; gates: Gate[]; metrics: { model: string; stages: Record<string, Record<string, unknown>>; config: ReturnType<typeof resolvePocConfig> } }
type PretrainMetrics = { steps: number; midStep: number; model: GPTConfig & { kind: 'gpt' }; checkpoints: { step: number; dir: string }[]; paramsSha256: string };

function cli(args: string[], timeoutMs = 120_000) {
  return new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
    const child = spawn(process.execPath, [join(root, 'bin/nccl-node.js'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '', err = '';
    child.stdout.on('data', (d: Buffer) => { out += d.toString(); });
    child.stderr.on('data', (d: Buffer) => { err += d.toString(); });
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('exit', (code) => { clearTimeout(timer); resolve({ code, out, err }); });
  });
}

/** The small overlay's GPT (dim 32, 4 heads, 2 layers, seqLen 16) on ~90 optimizer steps. */
const TINY_GPT = { connectivity: { iters: 3 }, model: { kind: 'gpt' }, pretrain: { tokens: 12_000 }, finetune: { steps: 150 } };

const sha = (chunks: ArrayBufferView[]) => {
  const h = createHash('sha256');
  for (const c of chunks) h.update(new Uint8Array(c.buffer, c.byteOffset, c.byteLength));
  return h.digest('hex');
};
const readReport = (dir: string) => JSON.parse(readFileSync(join(dir, 'report.json'), 'utf8')) as ReportJson;

describe('nccl-node poc with model.kind gpt at 2 ranks on Gloo', () => {
  const dir = mkdtempSync(join(tmpdir(), 'nccl-node-poc-gpt-'));
  let run: { code: number | null; out: string; err: string };
  let report: ReportJson;

  beforeAll(async () => {
    const cfg = join(dir, 'gpt.json');
    writeFileSync(cfg, JSON.stringify(TINY_GPT));
    run = await cli(['poc', '--out', dir, '--small', '--config', cfg, '--nproc-per-node', '2', '--backend', 'gloo']);
    report = readReport(dir);
  }, 150_000);

  it('every stage runs on the GPT and its gates pass; the report names the model', () => {
    expect(run.code, run.err).toBe(report.verdict === 'fail' ? 1 : 0);
    const stages = new Set(report.gates.map((g) => g.stage));
    for (const s of ['connectivity', 'pretrain', 'checkpoint', 'finetune', 'inference', 'canary']) expect(stages).toContain(s);
    for (const g of report.gates) expect(g.measured, `${g.stage}: ${g.name}`).not.toBeNull();
    // The latency canary compares two noisy samples on shared cores: only its evaluation is asserted.
    const decided = report.gates.filter((g) => !(g.stage === 'canary' && /time to first token/.test(g.name)));
    expect(decided.filter((g) => g.verdict !== 'pass').map((g) => `${g.stage}: ${g.name} ${g.measured} vs ${g.threshold} ${g.note ?? ''}`)).toEqual([]);
    expect(report.metrics.model).toBe('gpt');
    expect(report.title).toMatch(/^nccl-node POC, gpt \(2 ranks, gloo\)$/);
    expect(readFileSync(join(dir, 'report.md'), 'utf8')).toMatch(/^# nccl-node POC, gpt /);
    const pre = report.metrics.stages.pretrain as PretrainMetrics;
    expect(pre.model).toMatchObject({ kind: 'gpt', dim: 32, heads: 4, hidden: 64, layers: 2, seqLen: 16, seed: report.metrics.config.seed });
  });

  it('the checkpoints are the GPT\'s: the final one read into a fresh GPT has the restored run\'s SHA-256, which training moved off the initialisation', async () => {
    const pre = report.metrics.stages.pretrain as PretrainMetrics;
    const ck = report.metrics.stages.checkpoint as { paramsSha256: string; start: number };
    expect(ck.start).toBe(pre.midStep);
    const model = new GPT(pre.model);
    const final = pre.checkpoints.find((c) => c.step === pre.steps)!.dir;
    await load(final, Object.fromEntries(model.params.map((p) => [p.name, { data: p.data, offset: 0 }])));
    expect(sha(model.params.map((p) => p.data))).toBe(ck.paramsSha256);
    expect(sha(new GPT(pre.model).params.map((p) => p.data))).not.toBe(ck.paramsSha256);
    // A TinyLM of the same sizes finds none of its tensors there.
    await expect(loadModel(final, { ...pre.model, kind: 'tiny-lm' })).rejects.toThrow(/no tensor embed\.tok/);
  });

  it('the finetune scored with the GPT: its held-out exact match recomputed here by greedy decoding of the finetuned checkpoint', async () => {
    const pre = report.metrics.stages.pretrain as PretrainMetrics;
    const ft = report.metrics.stages.finetune as { checkpoint: string; correctAfter: number; heldOut: number };
    const vocab = await CompactVocab.read(join(dir, 'vocab.json'));
    const { heldOut } = problemsOf(report.metrics.config);
    const lm = await loadModel(ft.checkpoint, pre.model);
    expect(lm).toBeInstanceOf(GPT);
    expect(await exactMatch(lm, vocab, heldOut, { maxTokens: 4 })).toEqual({ correct: ft.correctAfter, total: ft.heldOut });
    const inf = report.metrics.stages.inference as { checkpoint: string; completed: number };
    expect(inf.checkpoint).toBe(ft.checkpoint);
  });

  it('the restore gate compares for real: the mid-run checkpoint one ulp off in one element fails "final parameters bit-exact"', async () => {
    const pre = report.metrics.stages.pretrain as PretrainMetrics;
    const mid = pre.checkpoints.find((c) => c.step === pre.midStep)!.dir;
    const { before, after } = await corruptOneUlp(mid, 'block0.attn.qkv.w', 5);
    expect(after).not.toBe(before);
    const r = await cli(['run', '--nproc-per-node', '2', '--master-port', '0', join(root, 'src/poc/rank.ts'), 'checkpoint',
      '--out', dir, '--config', join(dir, 'poc-config.json'), '--backend', 'gloo']);
    expect(r.code, r.err).toBe(0);
    const stage = JSON.parse(readFileSync(join(dir, 'stage-checkpoint.json'), 'utf8')) as { gates: Gate[]; metrics: { paramsSha256: string; expectedSha256: string } };
    const exact = stage.gates.find((g) => g.name === 'restored run: final parameters bit-exact')!;
    expect([exact.measured, exact.verdict]).toEqual([0, 'fail']);
    expect(stage.metrics.expectedSha256).toBe(pre.paramsSha256);
    expect(stage.metrics.paramsSha256).not.toBe(pre.paramsSha256);
  }, 60_000);
});

describe('the GPT behind the POC', () => {
  const cfg: GPTConfig = { vocab: 23, dim: 16, heads: 4, hidden: 40, layers: 2, seqLen: 7, seed: 3 };

  it('logits() is the training forward: its cross-entropy on a full row is forwardBackward\'s loss, and a prefix\'s logits are the full row\'s, bit for bit', async () => {
    const model = new GPT(cfg);
    const row = Int32Array.from({ length: cfg.seqLen + 1 }, (_, i) => (i * 7 + 2) % cfg.vocab);
    const loss = await model.forwardBackward(row, 1, { gradScale: 0 });
    const all = model.logits(row.subarray(0, cfg.seqLen), { last: false });
    expect(all.length).toBe(cfg.seqLen * cfg.vocab);
    let ce = 0;
    for (let t = 0; t < cfg.seqLen; t++) {
      const z = Array.from(all.subarray(t * cfg.vocab, (t + 1) * cfg.vocab));
      const max = Math.max(...z);
      ce += Math.log(z.reduce((a, v) => a + Math.exp(v - max), 0)) + max - z[row[t + 1]!]!;
    }
    expect(ce / cfg.seqLen).toBeCloseTo(loss, 6);
    for (const n of [1, 3, cfg.seqLen]) expect(model.logits(row.subarray(0, n))).toEqual(all.subarray((n - 1) * cfg.vocab, n * cfg.vocab));
    expect(() => model.logits([])).toThrow(/expected 1\.\.7 tokens, received 0/);
    expect(() => model.logits([1, cfg.vocab])).toThrow(/token 1 is 23, expected an id in 0\.\.22/);
  });

  it('a bad model kind is ERR_INVALID_ARGUMENT naming the kinds; a GPT needs dim divisible by heads', () => {
    const bad = (f: () => unknown) => {
      try {
        f();
      } catch (err) {
        expect(err).toBeInstanceOf(NcclNodeError);
        expect((err as NcclNodeError).code).toBe('ERR_INVALID_ARGUMENT');
        return (err as Error).message;
      }
      throw new Error('expected a throw');
    };
    expect(bad(() => resolvePocConfig({ model: { kind: 'llama' } }))).toMatch(/model\.kind: expected one of tiny-lm, gpt, received "llama"/);
    expect(bad(() => createModel({ ...cfg, kind: 'llama' as 'gpt' }))).toMatch(/expected one of tiny-lm, gpt, received "llama"/);
    expect(bad(() => resolvePocConfig({ model: { kind: 'gpt', dim: 30, heads: 4 } }))).toMatch(/model\.heads: the GPT needs dim divisible by heads/);
    // The default stays TinyLM, whose sizes need no heads.
    expect(resolvePocConfig({}).model.kind).toBe('tiny-lm');
    expect(resolvePocConfig({ model: { dim: 30 } }).model.dim).toBe(30);
  });
});
