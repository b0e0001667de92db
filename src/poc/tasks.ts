/**
 * The POC's text: problems with checkable answers (addition of small numbers) and a
 * pretraining corpus that teaches their format, all generated here from a seed so a
 * POC run needs no downloaded data and every stage can score exactly.
 *
 * The operand pairs are split once: `train` pairs appear in the corpus and in the
 * finetune set, `heldOut` pairs never do, so accuracy on them measures what was
 * learned rather than what was memorised. Numbers below 1000 are one token in the
 * cl100k/o200k BPE vocabularies, so "13+19=32\n" is six tokens.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { NcclNodeError } from '../errors.js';
import { mulberry32 } from '../util/prng.js';

export interface Problem {
  /** What the model is given, e.g. "13+19=". */
  prompt: string;
  /** The exact completion expected before the newline, e.g. "32". */
  answer: string;
}

export interface ProblemSet {
  train: Problem[];
  heldOut: Problem[];
}

export interface ProblemOptions {
  /** Operands are 0..maxOperand inclusive (at most 499, so sums stay one token). */
  maxOperand: number;
  /** Fraction of operand pairs kept out of the corpus and the finetune set (default 0.2). */
  heldOutFraction?: number;
  seed: number;
}

/** The line a solved problem is written as, in the corpus and the finetune set. */
export const solved = (p: Problem): string => `${p.prompt}${p.answer}\n`;

/** Every pair a+b with a, b in 0..maxOperand, split by a seeded shuffle. */
export function additionProblems(o: ProblemOptions): ProblemSet {
  const { maxOperand, heldOutFraction = 0.2, seed } = o;
  if (!Number.isInteger(maxOperand) || maxOperand < 1 || maxOperand > 499) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `maxOperand must be an integer in 1..499, received ${maxOperand}`);
  }
  if (!(heldOutFraction > 0 && heldOutFraction < 1)) {
    throw new NcclNodeError('ERR_INVALID_ARGUMENT', `heldOutFraction must be in (0, 1), received ${heldOutFraction}`);
  }
  const all: Problem[] = [];
  for (let a = 0; a <= maxOperand; a++) for (let b = 0; b <= maxOperand; b++) all.push({ prompt: `${a}+${b}=`, answer: String(a + b) });
  shuffle(all, mulberry32(seed ^ 0x5eed));
  const cut = Math.max(1, Math.round(all.length * heldOutFraction));
  return { heldOut: all.slice(0, cut), train: all.slice(cut) };
}

export interface CorpusOptions {
  problems: ProblemSet;
  /** Approximate size of the corpus text in bytes. */
  bytes: number;
  seed: number;
  /** Text files to split it into (default 4), as a corpus of several documents. */
  files?: number;
}

/**
 * Pretraining text: solved `train` problems interleaved with counting runs
 * ("4 5 6 7") and short sentences about sums, so the model sees numbers in order
 * and the problem format before it is finetuned on the problems alone.
 */
export function corpusText(o: CorpusOptions): string[] {
  const rand = mulberry32(o.seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const files = o.files ?? 4;
  const docs: string[] = [];
  for (let f = 0; f < files; f++) {
    const lines: string[] = [];
    let size = 0;
    while (size < o.bytes / files) {
      const u = rand();
      let line: string;
      if (u < 0.6) line = solved(pick(o.problems.train));
      else if (u < 0.8) {
        const start = Math.floor(rand() * 50);
        line = `${Array.from({ length: 3 + Math.floor(rand() * 5) }, (_, i) => start + i).join(' ')}\n`;
      } else {
        const p = pick(o.problems.train);
        line = `the sum of ${p.prompt.slice(0, -1).replace('+', ' and ')} is ${p.answer}.\n`;
      }
      lines.push(line);
      size += line.length;
    }
    docs.push(lines.join(''));
  }
  return docs;
}

/** Writes corpusText's documents as DIR/corpus-<i>.txt (input for `nccl-node data prepare`). */
export async function writeCorpus(dir: string, o: CorpusOptions): Promise<string[]> {
  await mkdir(dir, { recursive: true });
  const paths: string[] = [];
  for (const [i, text] of corpusText(o).entries()) {
    const path = join(dir, `corpus-${i}.txt`);
    await writeFile(path, text);
    paths.push(path);
  }
  return paths;
}

function shuffle<T>(xs: T[], rand: () => number): void {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
}
