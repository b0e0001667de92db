/**
 * Inference: TinyLM's forward-only logits against the training forward's loss, greedy
 * decoding's stopping rules and context window; the HTTP server (2 worker processes)
 * against greedy decoding in this process, token for token; bad requests; the open-loop
 * load generator against this process's own clock and stats; and inferenceStage.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { save } from '../../src/checkpoint/index.js';
import { TinyLM, type TinyLMConfig } from '../../src/models/tiny-lm/tiny-lm.js';
import { finetuneRows } from '../../src/poc/finetune.js';
import { complete, generate, loadModel } from '../../src/poc/generate.js';
import { inferenceStage } from '../../src/poc/inference.js';
import { poissonArrivals, runLoad, summarize } from '../../src/poc/loadgen.js';
import { renderSvg } from '../../src/poc/report.js';
import { startServer, type RunningServer } from '../../src/poc/serve.js';
import { percentile } from '../../src/poc/stats.js';
import { additionProblems, corpusText, solved } from '../../src/poc/tasks.js';
import { CompactVocab } from '../../src/poc/vocab.js';

const CFG: TinyLMConfig = { vocab: 97, dim: 24, hidden: 40, layers: 3, seqLen: 10, seed: 11 };

/** Mean softmax cross-entropy of next-token logits rows against targets, in float64. */
function crossEntropy(logits: Float32Array, targets: ArrayLike<number>, V: number): number {
  let sum = 0;
  for (let t = 0; t < targets.length; t++) {
    const row = logits.subarray(t * V, (t + 1) * V);
    let max = -Infinity;
    for (const v of row) max = Math.max(max, v);
    let z = 0;
    for (const v of row) z += Math.exp(v - max);
    sum += Math.log(z) + max - row[targets[t]!]!;
  }
  return sum / targets.length;
}

describe('TinyLM forward-only inference', () => {
  it('gives logits whose cross-entropy is the loss forwardBackward returns, and leaves gradients alone', async () => {
    const model = new TinyLM(CFG);
    // Train a few steps by hand so the parameters are not the initial ones.
    for (let s = 0; s < 3; s++) {
      const rows = Int32Array.from({ length: 2 * (CFG.seqLen + 1) }, (_, i) => (i * 7 + s * 3) % CFG.vocab);
      await model.forwardBackward(rows, 2, { gradScale: 1 });
      for (const p of model.params) for (let i = 0; i < p.size; i++) p.data[i] = p.data[i]! - 0.01 * p.grad[i]!;
      for (const p of model.params) p.grad.fill(0);
    }
    for (const seed of [1, 2, 3]) {
      const seq = Int32Array.from({ length: CFG.seqLen + 1 }, (_, i) => (seed * 31 + i * i * 13) % CFG.vocab);
      const loss = await model.forwardBackward(seq, 1, { gradScale: 0 });
      const all = model.logits(seq.subarray(0, CFG.seqLen), { last: false });
      expect(all).toHaveLength(CFG.seqLen * CFG.vocab);
      expect(crossEntropy(all, seq.subarray(1), CFG.vocab)).toBeCloseTo(loss, 5);
      // The last row alone is the same numbers; a prefix's logits do not depend on what follows (causal).
      expect(model.logits(seq.subarray(0, CFG.seqLen))).toEqual(all.subarray((CFG.seqLen - 1) * CFG.vocab));
      expect(model.logits(seq.subarray(0, 4), { last: false })).toEqual(all.subarray(0, 4 * CFG.vocab));
    }
    for (const p of model.params) expect(p.grad.every((g) => g === 0)).toBe(true);
    expect(() => model.logits([])).toThrow(/1\.\.10 tokens/);
    expect(() => model.logits(new Int32Array(11))).toThrow(/received 11/);
    expect(() => model.logits([CFG.vocab])).toThrow(/id in 0\.\.96/);
  });

  it('decodes greedily: the argmax of each step, streamed, stopping at a newline or maxTokens, keeping the last seqLen tokens', async () => {
    const problems = additionProblems({ maxOperand: 9, seed: 1 });
    const vocab = await CompactVocab.build('cl100k_base', { texts: corpusText({ problems, bytes: 4000, seed: 1 }) });
    const model = new TinyLM({ ...CFG, vocab: vocab.size, seqLen: 6 });
    const prompt = '1+2=3\n4+5=9\n7+1=';
    const context = Array.from(vocab.encode(prompt));
    expect(context.length).toBeGreaterThan(6);
    const ids: number[] = [];
    const streamed: string[] = [];
    const it = generate(model, vocab, prompt, { maxTokens: 5 });
    let r = await it.next();
    while (!r.done) {
      ids.push(r.value.id);
      streamed.push(r.value.text);
      r = await it.next();
    }
    const done = r.value;
    // Reference: argmax over the last six tokens of the growing context, recomputed here.
    const expected: number[] = [];
    for (let k = 0; k < 5; k++) {
      const logits = model.logits(context.slice(-6));
      const best = logits.indexOf(Math.max(...logits));
      expected.push(best);
      context.push(best);
      if (vocab.decode([best]).includes('\n')) break;
    }
    expect(done.tokens).toEqual(expected);
    expect(done.text).toBe(streamed.join(''));
    expect(done.finish).toBe(vocab.decode(expected).includes('\n') ? 'stop' : 'length');
    // A stopping token that is only the newline streams nothing.
    expect(ids).toEqual(done.finish === 'stop' && vocab.decode(expected.slice(-1)).startsWith('\n') ? expected.slice(0, -1) : expected);

    // A model whose head always prefers the newline stops at once with an empty completion.
    const nl = vocab.encode('\n')[0]!;
    model.bOut.data.fill(0);
    model.wOut.data.fill(0);
    model.bOut.data[nl] = 1;
    expect(await complete(model, vocab, solved(problems.train[0]!).trimEnd())).toEqual({ text: '', tokens: [nl], finish: 'stop' });
    await expect(complete(model, vocab, '')).rejects.toThrow(/no tokens/);
  });
});

const problems = additionProblems({ maxOperand: 9, seed: 2 });
const dir = mkdtempSync(join(tmpdir(), 'poc-inference-'));
const vocabPath = join(dir, 'vocab.json');
let vocab: CompactVocab;
let model: TinyLMConfig;
const ckpt: Record<'candidate' | 'baseline', string> = { candidate: '', baseline: '' };

/** A TinyLM trained by plain SGD on the solved problems for `steps` steps, saved as a checkpoint. */
async function trained(name: string, steps: number): Promise<string> {
  const lm = new TinyLM(model);
  const encoded = problems.train.map((p) => vocab.encode(solved(p)));
  for (let s = 0; s < steps; s++) {
    await lm.forwardBackward(finetuneRows(encoded, model.seqLen, 1, s, 0, 8), 8, { gradScale: 1 / (8 * model.seqLen) });
    for (const p of lm.params) for (let i = 0; i < p.size; i++) p.data[i] = p.data[i]! - 0.3 * p.grad[i]!;
    for (const p of lm.params) p.grad.fill(0);
  }
  const tensors = Object.fromEntries(lm.params.map((p) => [p.name, { data: p.data, globalShape: p.shape, offset: 0 }]));
  return (await (await save({ tensors, train: { step: steps } }, join(dir, name))).committed).dir;
}

beforeAll(async () => {
  vocab = await CompactVocab.build('cl100k_base', { texts: [...problems.train, ...problems.heldOut].map(solved) });
  await vocab.write(vocabPath);
  model = { vocab: vocab.size, dim: 32, hidden: 64, layers: 2, seqLen: 12, seed: 3 };
  ckpt.candidate = await trained('candidate', 200);
  ckpt.baseline = await trained('baseline', 0);
}, 60_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Streamed { status: number; events: { event: string; data: Record<string, unknown> }[]; body: string }

async function post(url: string, body: string): Promise<Streamed> {
  const res = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  const text = await res.text();
  const events = res.headers.get('content-type') === 'text/event-stream'
    ? text.split('\n\n').filter(Boolean).map((e) => ({ event: /^event: (.*)$/m.exec(e)![1]!, data: JSON.parse(/^data: (.*)$/m.exec(e)![1]!) as Record<string, unknown> }))
    : [];
  return { status: res.status, events, body: text };
}

describe('inference server', () => {
  let server: RunningServer;
  beforeAll(async () => {
    server = await startServer({ checkpoint: ckpt.candidate, model, vocabPath, workers: 2 });
  }, 60_000);
  afterAll(async () => server?.close());

  it('streams the greedy completion token for token, from either worker', async () => {
    const lm = await loadModel(ckpt.candidate, model);
    const prompts = [...problems.heldOut.slice(0, 8).map((p) => p.prompt), '1+2=3\n4+4=8\n5+3=6\n2+2=', 'zebra 7+']; // a context over seqLen, unknown text
    const served = await Promise.all(prompts.map((prompt) => post(server.url, JSON.stringify({ prompt, max_tokens: 6 }))));
    for (const [i, prompt] of prompts.entries()) {
      const ref: { id: number; text: string }[] = [];
      const it = generate(lm, vocab, prompt, { maxTokens: 6 });
      let r = await it.next();
      for (; !r.done; r = await it.next()) ref.push(r.value);
      const got = served[i]!;
      expect(got.status).toBe(200);
      const tokens = got.events.filter((e) => e.event === 'token').map((e) => e.data);
      expect(tokens).toEqual(ref.map((t, index) => ({ index, id: t.id, text: t.text })));
      expect(got.events.at(-1)).toEqual({ event: 'done', data: { text: r.value.text, tokens: r.value.tokens.length, finish: r.value.finish } });
    }
    // Fresh connections are spread over the workers.
    const pids = new Set<number>();
    for (let i = 0; i < 8; i++) pids.add(((await (await fetch(`${server.url}/health`, { headers: { connection: 'close' } })).json()) as { pid: number }).pid);
    expect(pids.size).toBe(2);
  });

  it('answers bad requests with a 400 and a stable code, and keeps serving', async () => {
    const cases: [string, string][] = [
      ['{"prompt": "1+', 'invalid_json'], ['[1, 2]', 'invalid_json'], ['null', 'invalid_json'], ['{}', 'missing_prompt'],
      ['{"prompt": 12}', 'invalid_prompt'], ['{"prompt": ""}', 'invalid_prompt'], ['{"prompt": "1+1=", "max_tokens": 0}', 'invalid_max_tokens'],
      ['{"prompt": "1+1=", "max_tokens": 1000}', 'invalid_max_tokens'], ['{"prompt": "1+1=", "max_tokens": 2.5}', 'invalid_max_tokens'],
      ['{"prompt": "1+1=", "max_tokens": "3"}', 'invalid_max_tokens'], [JSON.stringify({ prompt: 'x'.repeat(70_000) }), 'body_too_large'],
    ];
    for (const [body, code] of cases) {
      const r = await post(server.url, body);
      expect(r.status, body.slice(0, 40)).toBe(400);
      expect((JSON.parse(r.body) as { error: { code: string } }).error.code).toBe(code);
    }
    expect((await fetch(`${server.url}/v1/completions`)).status).toBe(405);
    const missing = await fetch(`${server.url}/v2/anything`);
    expect([missing.status, ((await missing.json()) as { error: { code: string } }).error.code]).toEqual([404, 'not_found']);
    const ok = await post(server.url, JSON.stringify({ prompt: '3+4=', max_tokens: 3 }));
    expect(ok.status).toBe(200);
    expect(ok.events.at(-1)!.event).toBe('done');
  });

  it('drives open-loop Poisson load: every request recorded, timings consistent with this process, answers scored exactly', async () => {
    const lm = await loadModel(ckpt.candidate, model);
    const t0 = performance.now();
    const records = await runLoad({ url: server.url, problems: problems.heldOut, rate: 40, requests: 40, seed: 9, maxTokens: 4 });
    const wall = performance.now() - t0;
    expect(records).toHaveLength(40);
    const arrivals = poissonArrivals(40, 40, 9);
    for (const r of records) {
      expect(r.error).toBeUndefined();
      expect(r.dueMs).toBe(arrivals[r.index]);
      // Sent at its arrival time, not after earlier answers (open loop), and within this process's clock.
      expect(r.sentMs).toBeGreaterThanOrEqual(r.dueMs - 1);
      expect(r.sentMs - r.dueMs).toBeLessThan(250);
      expect(r.ttftMs!).toBeGreaterThan(0);
      expect(r.ttftMs!).toBeLessThanOrEqual(r.e2eMs!);
      expect(r.sentMs + r.e2eMs!).toBeLessThanOrEqual(wall);
      if (r.tpotMs !== null) expect(r.tpotMs * (r.tokenEvents - 1)).toBeLessThanOrEqual(r.e2eMs! - r.ttftMs! + 1e-6);
      const ref = await complete(lm, vocab, r.prompt, { maxTokens: 4 });
      expect(r.text).toBe(ref.text);
      expect(r.correct).toBe(ref.text === r.expected);
    }
    const s = summarize(records, { rate: 40, sloMs: 200 });
    const e2e = records.map((r) => r.e2eMs!);
    expect(s.completed).toBe(40);
    expect(s.e2eMs!.p95.estimate).toBeCloseTo(percentile(e2e, 95), 9);
    expect(s.e2eMs!.p99.low).toBeLessThanOrEqual(s.e2eMs!.p99.estimate);
    expect(s.goodput).toBe(e2e.filter((v) => v <= 200).length / 40);
    expect(s.correct).toBe(records.filter((r) => r.correct).length);
  });
});

it('Poisson arrivals: exponential gaps with mean 1/rate', () => {
  const t = poissonArrivals(20_000, 50, 4);
  const gaps = t.map((v, i) => v - (i ? t[i - 1]! : 0));
  const mean = gaps.reduce((a, b) => a + b, 0) / gaps.length;
  expect(mean).toBeGreaterThan(20 * 0.97);
  expect(mean).toBeLessThan(20 * 1.03);
  // Exponential: the median gap is ln 2 times the mean.
  expect(percentile(gaps, 50) / 20).toBeCloseTo(Math.LN2, 1);
});

it('inferenceStage serves both checkpoints under the same load and evaluates every gate', async () => {
  const [inf, can] = await inferenceStage({
    candidate: ckpt.candidate, baseline: ckpt.baseline, model, vocabPath, problems: problems.heldOut,
    workers: 2, rate: 30, requests: 30, minSamples: 20, slo: { p95Ms: 200, p99Ms: 500 }, maxTokens: 4,
  });
  expect(inf.stage).toBe('inference');
  expect(can.stage).toBe('canary');
  expect(inf.gates.map((g) => g.name)).toEqual(['end-to-end latency p95', 'end-to-end latency p99', 'completed samples', 'served exact-match accuracy']);
  for (const g of [...inf.gates, ...can.gates]) expect(['pass', 'fail']).toContain(g.verdict);
  expect(inf.gates[2]!.measured).toBe(30);
  const m = can.metrics as { verdict: string; baseline: { requests: number; completed: number } };
  expect(m.verdict).toBe(can.gates.every((g) => g.verdict === 'pass') ? 'promote' : 'roll back');
  expect(m.baseline).toMatchObject({ requests: 30, completed: 30 });
  for (const plot of inf.plots) expect(await renderSvg(plot)).toContain('<svg');
}, 60_000);
