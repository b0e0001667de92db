/**
 * Greedy decoding with the POC's model (TinyLM or GPT, through their common
 * LanguageModel interface) in one process: what the finetune stage scores with,
 * what each inference server worker runs, and what tests recompute independently.
 * A checkpoint written by FSDP at any world size loads here whole: the checkpoint
 * names tensors per parameter with their global shapes, so one process asks the
 * loader for every parameter from offset 0 and gets the full tensors.
 */
import { NcclNodeError } from '../errors.js';
import { load, readManifest, resolveCheckpoint } from '../checkpoint/index.js';
import { createModel, modelKind, type LanguageModel, type ModelConfig } from '../models/language-model.js';
import type { CompactVocab } from './vocab.js';
import type { Problem } from './tasks.js';

/** The model `cfg` names holding the parameters of checkpoint `dir` (one checkpoint, or a root: its newest committed one). */
export async function loadModel(dir: string, cfg: ModelConfig): Promise<LanguageModel> {
  const model = createModel(cfg);
  const resolved = await resolveCheckpoint(dir);
  const m = await readManifest(resolved);
  for (const p of model.params) {
    const t = m.tensors[p.name];
    if (!t) throw new NcclNodeError('ERR_SIZE_MISMATCH', `checkpoint ${resolved}: no tensor ${p.name} (expected a ${modelKind(cfg)} checkpoint of this config)`, { dir: resolved, tensor: p.name });
    if (t.globalShape.join('x') !== p.shape.join('x')) {
      throw new NcclNodeError('ERR_SIZE_MISMATCH', `checkpoint ${resolved}: ${p.name} has shape [${t.globalShape.join(', ')}], the model config expects [${p.shape.join(', ')}]`, { dir: resolved, tensor: p.name });
    }
  }
  // Only the parameters: optimizer moments in the checkpoint are left unread.
  await load(resolved, Object.fromEntries(model.params.map((p) => [p.name, { data: p.data, offset: 0 }])));
  return model;
}

export interface GeneratedToken {
  /** Model token id. */
  id: number;
  /** The text this token adds to the completion (incremental decoding of everything generated so far). */
  text: string;
}

export interface GenerateOptions {
  /** Most tokens to produce, the stopping newline included (default 16). */
  maxTokens?: number;
}

/**
 * Greedy decoding of `prompt`: the argmax token at each step until one that
 * contains a newline (which ends the completion and is not part of it) or
 * maxTokens. Yields each token as it is produced. Contexts longer than seqLen
 * keep their last seqLen tokens (the model has seqLen positions).
 */
export async function* generate(model: LanguageModel, vocab: CompactVocab, prompt: string, o: GenerateOptions = {}): AsyncGenerator<GeneratedToken, Completion> {
  const maxTokens = o.maxTokens ?? 16;
  if (!Number.isInteger(maxTokens) || maxTokens < 1) throw new NcclNodeError('ERR_INVALID_ARGUMENT', `generate: maxTokens must be a positive integer, received ${maxTokens}`);
  const context = Array.from(vocab.encode(prompt));
  if (context.length === 0) throw new NcclNodeError('ERR_INVALID_ARGUMENT', 'generate: the prompt has no tokens');
  const T = model.cfg.seqLen;
  const out: number[] = [];
  let text = '';
  for (let k = 0; k < maxTokens; k++) {
    const logits = model.logits(context.length > T ? context.slice(-T) : context);
    let best = 0;
    for (let v = 1; v < logits.length; v++) if (logits[v]! > logits[best]!) best = v;
    context.push(best);
    out.push(best);
    const whole = vocab.decode(out);
    const piece = whole.slice(text.length);
    const nl = piece.indexOf('\n');
    if (nl >= 0) {
      if (nl > 0) yield { id: best, text: piece.slice(0, nl) };
      return { text: text + piece.slice(0, nl), tokens: out, finish: 'stop' };
    }
    text = whole;
    yield { id: best, text: piece };
    // Give the event loop a turn between tokens, so a server streams each one as it is produced.
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  return { text, tokens: out, finish: 'length' };
}

export interface Completion {
  /** The completion before the newline. */
  text: string;
  /** Every model token produced, the stopping one included. */
  tokens: number[];
  finish: 'stop' | 'length';
}

/** generate() run to its end. */
export async function complete(model: LanguageModel, vocab: CompactVocab, prompt: string, o: GenerateOptions = {}): Promise<Completion> {
  const it = generate(model, vocab, prompt, o);
  for (;;) {
    const r = await it.next();
    if (r.done) return r.value;
  }
}

/** Exact-match accuracy of greedy completions on `problems`: correct count and total. */
export async function exactMatch(model: LanguageModel, vocab: CompactVocab, problems: readonly Problem[], o: GenerateOptions = {}): Promise<{ correct: number; total: number }> {
  let correct = 0;
  for (const p of problems) if ((await complete(model, vocab, p.prompt, { maxTokens: o.maxTokens ?? 4 })).text === p.answer) correct++;
  return { correct, total: problems.length };
}
