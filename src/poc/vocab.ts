/**
 * A compact model vocabulary over a real BPE tokenizer: the tokenizer's ids that the
 * POC's text uses, renumbered 1..n (0 is "unknown"). The tokenizer still decides how
 * text splits (cl100k_base by default), but the model's embedding and output head
 * are n + 1 rows instead of 100k, which is what lets a pretraining probe run on CPUs.
 * The table is written beside the checkpoints (vocab.json) so every later stage and
 * the inference server map text exactly as pretraining did.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { z } from 'zod';
import { loadTokenizer, type TokenDataset, type Tokenizer } from '../data/index.js';
import { NcclNodeError } from '../errors.js';

const vocabSchema = z.object({
  version: z.literal(1),
  tokenizer: z.string(),
  tokenizerVersion: z.string(),
  /** Tokenizer ids in model order: model id i + 1 is ids[i]. */
  ids: z.array(z.number().int().nonnegative()),
});
export type VocabFile = z.infer<typeof vocabSchema>;

export class CompactVocab {
  readonly #toModel: Map<number, number>;

  private constructor(readonly tokenizer: Tokenizer, readonly ids: readonly number[]) {
    this.#toModel = new Map(ids.map((id, i) => [id, i + 1]));
  }

  /** Model vocabulary size, counting the unknown id 0. */
  get size(): number {
    return this.ids.length + 1;
  }

  /** Every id in the dataset's shards and in the given texts, in ascending tokenizer order. */
  static async build(tokenizerName: string, o: { dataset?: TokenDataset; texts?: readonly string[] }): Promise<CompactVocab> {
    const tokenizer = await loadTokenizer(tokenizerName);
    const seen = new Set<number>();
    for (const t of o.texts ?? []) for (const id of tokenizer.encode(t)) seen.add(id);
    if (o.dataset) {
      const chunk = 1 << 20;
      for (let off = 0; off < o.dataset.tokens; off += chunk) {
        for (const id of await o.dataset.read(off, Math.min(chunk, o.dataset.tokens - off))) seen.add(id);
      }
    }
    return new CompactVocab(tokenizer, [...seen].sort((a, b) => a - b));
  }

  static async read(path: string): Promise<CompactVocab> {
    let parsed: VocabFile;
    try {
      parsed = vocabSchema.parse(JSON.parse(await readFile(path, 'utf8')));
    } catch (err) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `vocabulary ${path}: expected a vocab.json written by the POC: ${(err as Error).message}`, { file: path });
    }
    const tokenizer = await loadTokenizer(parsed.tokenizer);
    if (tokenizer.version !== parsed.tokenizerVersion) {
      throw new NcclNodeError('ERR_INVALID_ARGUMENT', `vocabulary ${path}: written with ${parsed.tokenizer} from gpt-tokenizer ${parsed.tokenizerVersion}, this install has ${tokenizer.version}`, { file: path });
    }
    return new CompactVocab(tokenizer, parsed.ids);
  }

  async write(path: string): Promise<void> {
    const file: VocabFile = { version: 1, tokenizer: this.tokenizer.name, tokenizerVersion: this.tokenizer.version, ids: [...this.ids] };
    await writeFile(path, JSON.stringify(file));
  }

  /** Tokenizer ids -> model ids (0 for an id outside the vocabulary). */
  toModel(tokens: ArrayLike<number>): Int32Array {
    const out = new Int32Array(tokens.length);
    for (let i = 0; i < tokens.length; i++) out[i] = this.#toModel.get(tokens[i]!) ?? 0;
    return out;
  }

  encode(text: string): Int32Array {
    return this.toModel(this.tokenizer.encode(text));
  }

  /** Model ids -> text; the unknown id decodes to U+FFFD. */
  decode(modelIds: ArrayLike<number>): string {
    let text = '';
    let run: number[] = [];
    const flush = (): void => {
      if (run.length) text += this.tokenizer.decode(run);
      run = [];
    };
    for (let i = 0; i < modelIds.length; i++) {
      const m = modelIds[i]!;
      if (m >= 1 && m <= this.ids.length) run.push(this.ids[m - 1]!);
      else {
        flush();
        text += '\uFFFD';
      }
    }
    flush();
    return text;
  }
}
