/**
 * `nccl-node data prepare|verify|inspect`: token corpora for training (docs/data.md).
 * Exit codes: 0 fine, 1 unreadable or corrupt input (the message names the file),
 * 2 bad usage.
 */
import type { Command } from 'commander';
import { SingleBar, Presets } from 'cli-progress';
import { prepare, TOKENIZERS } from '../../data/prepare.js';
import { TokenDataset } from '../../data/dataset.js';

async function fail(f: () => Promise<void>): Promise<void> {
  try {
    await f();
  } catch (err) {
    process.stderr.write(`nccl-node data: ${(err as Error).message}\n`);
    process.exitCode = 1;
  }
}

function mb(bytes: number): string {
  return `${(bytes / 1e6).toFixed(1)} MB`;
}

export function registerDataCommand(program: Command): void {
  const data = program.command('data').description('prepare and check token corpora for training');

  data.command('prepare <files...>')
    .description('tokenize text (.txt, one document per file; .jsonl, one "text" per line) or take nanoGPT .bin tokens into shards with an index')
    .requiredOption('--tokenizer <name>', `a gpt-tokenizer encoding: ${TOKENIZERS.join(', ')}`)
    .requiredOption('--out <dir>', 'output directory')
    .option('--shard-tokens <n>', 'tokens per shard', (v) => Number(v), 1 << 24)
    .option('--no-progress', 'no progress bar')
    .action((files: string[], o: { tokenizer: string; out: string; shardTokens: number; progress: boolean }) =>
      fail(async () => {
        const bar = o.progress && process.stderr.isTTY ? new SingleBar({ format: 'tokenizing [{bar}] {percentage}% | {value}/{total} bytes | ETA {eta}s' }, Presets.shades_classic) : null;
        let started = false;
        const index = await prepare({
          tokenizer: o.tokenizer, out: o.out, files, shardTokens: o.shardTokens,
          onProgress: (done, total) => {
            if (!bar) return;
            if (!started) { bar.start(total, 0); started = true; }
            bar.update(Math.min(done, total));
          },
        }).finally(() => bar?.stop());
        process.stdout.write(`${o.out}: ${index.tokens} ${index.dtype} tokens in ${index.shards.length} shard(s), ` +
          `${index.documents.count} documents, tokenizer ${index.tokenizer.name} (${index.tokenizer.package} ${index.tokenizer.version})\n`);
      }));

  data.command('verify <dir>').description('check every file of a prepared corpus against its length and SHA-256').action((dir: string) =>
    fail(async () => {
      const ds = await TokenDataset.open(dir);
      await ds.verify();
      const bytes = ds.index.shards.reduce((a, s) => a + s.bytes, 0);
      process.stdout.write(`${dir}: OK (${ds.tokens} tokens, ${mb(bytes)} verified, fingerprint ${ds.fingerprint.slice(0, 16)})\n`);
      await ds.close();
    }));

  data.command('inspect <dir>').description('the index of a prepared corpus, as JSON').action((dir: string) =>
    fail(async () => {
      const ds = await TokenDataset.open(dir);
      process.stdout.write(`${JSON.stringify({ fingerprint: ds.fingerprint, ...ds.index }, null, 2)}\n`);
      await ds.close();
    }));
}
