// Token corpora: text through the real BPE tokenizer (gpt-tokenizer) into shards and
// back, nanoGPT .bin files written by numpy, bad input named by file, and the loader's
// global order: the same sample sequence at any data-parallel size, across an
// interrupted and resized run, with every epoch a permutation.
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { decode as gpt2Decode, encode as gpt2Encode } from 'gpt-tokenizer/encoding/gpt2';
import { DataLoader, TokenDataset, prepare } from '../../src/data/index.js';
import { isNcclNodeError } from '../../src/errors.js';
import { pythonWith } from '../helpers/python.js';
import { repoRoot } from '../helpers/ranks.js';

const scratch = mkdtempSync(join(tmpdir(), 'nccl-node-data-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const TEXTS = [
  'Hello world, this is the first document. It has two sentences.',
  'Zwei: ünïcödé text, emoji 🚀, and <|endoftext|> written as plain text.',
  'The third one is longer. '.repeat(40),
];
const LINES = ['{"text": "a json line"}', '', '{"text": "another line with 12 + 7 = 19"}', '{"text": "last"}'];

function inputs(): string[] {
  const dir = join(scratch, 'in');
  mkdirSync(dir, { recursive: true });
  const files = TEXTS.map((t, i) => { const f = join(dir, `doc${i}.txt`); writeFileSync(f, t); return f; });
  const jl = join(dir, 'more.jsonl');
  writeFileSync(jl, `${LINES.join('\n')}\n`);
  return [...files, jl];
}

async function documents(ds: TokenDataset): Promise<number[][]> {
  const starts = new BigUint64Array(new Uint8Array(readFileSync(join(ds.dir, 'documents.bin'))).buffer);
  const bounds = [...Array.from(starts, Number), ds.tokens];
  const out: number[][] = [];
  for (let i = 0; i + 1 < bounds.length; i++) out.push(Array.from(await ds.read(bounds[i]!, bounds[i + 1]! - bounds[i]!)));
  return out;
}

async function expectCode(p: Promise<unknown> | (() => unknown), code: string, message: RegExp): Promise<void> {
  const err = await (typeof p === 'function' ? Promise.resolve().then(p) : p).then(() => null, (e: unknown) => e);
  expect(err, `expected ${code}`).not.toBeNull();
  expect(isNcclNodeError(err, code as never), String(err)).toBe(true);
  expect((err as Error).message).toMatch(message);
}

describe('data prepare', () => {
  it('text and JSON lines through gpt2 into several shards decode back to the documents', async () => {
    const out = join(scratch, 'gpt2');
    const index = await prepare({ tokenizer: 'gpt2', out, files: inputs(), shardTokens: 50 });
    expect(index.dtype).toBe('uint16');
    expect(index.tokenizer).toMatchObject({ name: 'gpt2', package: 'gpt-tokenizer', vocabSize: 50257, eot: 50256 });
    expect(index.shards.length).toBeGreaterThan(3);
    expect(index.sources.map((s) => [s.file, s.documents])).toEqual([['doc0.txt', 1], ['doc1.txt', 1], ['doc2.txt', 1], ['more.jsonl', 3]]);
    expect(index.sources.reduce((a, s) => a + s.tokens, 0)).toBe(index.tokens);
    const ds = await TokenDataset.open(out);
    await ds.verify();
    const docs = await documents(ds);
    const want = [...TEXTS, 'a json line', 'another line with 12 + 7 = 19', 'last'];
    expect(docs.length).toBe(want.length);
    docs.forEach((d, i) => {
      expect(d[d.length - 1]).toBe(50256); // end of text after every document
      expect(gpt2Decode(d.slice(0, -1))).toBe(want[i]);
      expect(d.slice(0, -1)).toEqual(gpt2Encode(want[i]!, { disallowedSpecial: new Set() }));
    });
    // GPT-2's published ids: "Hello" 15496, " world" 995.
    expect(docs[0]!.slice(0, 2)).toEqual([15496, 995]);
    await ds.close();
  });

  it('a vocabulary past 65536 ids is stored as uint32', async () => {
    const index = await prepare({ tokenizer: 'cl100k_base', out: join(scratch, 'cl100k'), files: inputs().slice(0, 1) });
    expect(index.dtype).toBe('uint32');
    const ds = await TokenDataset.open(join(scratch, 'cl100k'));
    expect((await ds.read(0, ds.tokens)).constructor).toBe(Uint32Array);
    await ds.close();
  });

  it('nanoGPT .bin files written by numpy are taken token for token; bad ones are named', async () => {
    const python = await pythonWith(['numpy']);
    const ids = gpt2Encode('Some text for a nanoGPT binary. '.repeat(5));
    const bin = join(scratch, 'train.bin');
    execFileSync(python, ['-c', 'import sys, json, numpy as np; np.array(json.load(sys.stdin), dtype=np.uint16).tofile(sys.argv[1])', bin],
      { input: JSON.stringify(ids) });
    await prepare({ tokenizer: 'gpt2', out: join(scratch, 'bin'), files: [bin] });
    const ds = await TokenDataset.open(join(scratch, 'bin'));
    expect(Array.from(await ds.read(0, ds.tokens))).toEqual(ids);
    await ds.close();
    const big = join(scratch, 'big.bin');
    execFileSync(python, ['-c', 'import sys, numpy as np; np.array([1, 2, 60000], dtype=np.uint16).tofile(sys.argv[1])', big]);
    await expectCode(prepare({ tokenizer: 'gpt2', out: join(scratch, 'bad1'), files: [big] }), 'ERR_INVALID_ARGUMENT', /big\.bin token 2 is 60000, outside the vocabulary \(50257 ids\)/);
    await expectCode(prepare({ tokenizer: 'cl100k_base', out: join(scratch, 'bad2'), files: [bin] }), 'ERR_INVALID_ARGUMENT', /train\.bin holds uint16 tokens, but the vocabulary has 100264 ids/);
    const odd = join(scratch, 'odd.bin');
    writeFileSync(odd, Buffer.from([1, 2, 3]));
    await expectCode(prepare({ tokenizer: 'gpt2', out: join(scratch, 'bad3'), files: [odd] }), 'ERR_IO', /odd\.bin has 3 bytes, not a whole number of uint16 tokens/);
    await expectCode(prepare({ tokenizer: 'gpt3', out: join(scratch, 'bad4'), files: [bin] }), 'ERR_INVALID_ARGUMENT', /unknown tokenizer "gpt3"/);
  }, 300_000);

  it('a truncated, altered or unreadable shard is an error naming the file', async () => {
    const src = join(scratch, 'gpt2');
    const copy = (name: string) => { const d = join(scratch, name); execFileSync('cp', ['-r', src, d]); return d; };
    const t = copy('truncated');
    truncateSync(join(t, 'shard-00001.bin'), 10);
    await expectCode(TokenDataset.open(t), 'ERR_IO', /shard-00001\.bin has 10 bytes, the index says 100 \(truncated or replaced\)/);
    const f = copy('flipped');
    const shard = join(f, 'shard-00002.bin');
    const bytes = readFileSync(shard);
    bytes[7]! ^= 1;
    writeFileSync(shard, bytes);
    const ds = await TokenDataset.open(f);
    await expectCode(ds.verify(), 'ERR_CHECKSUM', /shard-00002\.bin has SHA-256 [0-9a-f]{64}, the index says/);
    const cli = spawnSync(process.execPath, [join(repoRoot, 'bin/nccl-node.js'), 'data', 'verify', f], { encoding: 'utf8' });
    expect(cli.status).toBe(1);
    expect(cli.stderr).toMatch(/nccl-node data: .*shard-00002\.bin has SHA-256/);
    const u = copy('unreadable');
    rmSync(join(u, 'shard-00000.bin'));
    mkdirSync(join(u, 'shard-00000.bin'));
    await expectCode(TokenDataset.open(u), 'ERR_IO', /shard-00000\.bin has no file, the index says 100/);
    const i = copy('badindex');
    writeFileSync(join(i, 'index.json'), readFileSync(join(i, 'index.json'), 'utf8').replace('"uint16"', '"uint8"'));
    await expectCode(TokenDataset.open(i), 'ERR_CHECKSUM', /index\.json at dtype/);
    chmodSync(join(i, 'index.json'), 0o644);
  });

  it('the CLI prepares a corpus and prints what it wrote', () => {
    const out = join(scratch, 'cli');
    const r = spawnSync(process.execPath, [join(repoRoot, 'bin/nccl-node.js'), 'data', 'prepare', '--tokenizer', 'gpt2', '--out', out, ...inputs()], { encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/uint16 tokens in 1 shard\(s\), 6 documents, tokenizer gpt2 \(gpt-tokenizer \d+\.\d+\.\d+\)/);
  });
});

describe('DataLoader', () => {
  const corpus = async () => {
    const out = join(scratch, 'loader');
    const text = Array.from({ length: 60 }, (_, i) => `Document number ${i} says something about ${i * 7 % 13} things.`);
    const dir = join(scratch, 'loader-in');
    mkdirSync(dir, { recursive: true });
    const files = text.map((t, i) => { const f = join(dir, `d${i}.txt`); writeFileSync(f, t); return f; });
    await prepare({ tokenizer: 'gpt2', out, files, shardTokens: 97 });
    return out;
  };
  const SEQ = 8, B = 12;

  /** The global id sequence of steps run by `world` loaders from `state`. */
  async function run(dir: string, world: number, steps: number, state?: ReturnType<DataLoader['state']>) {
    const loaders = await Promise.all(Array.from({ length: world }, (_, rank) => DataLoader.create(dir, { seqLen: SEQ, globalBatch: B, rank, worldSize: world, seed: 1234 })));
    if (state) for (const l of loaders) l.load(state);
    const ids: number[] = [];
    for (let s = 0; s < steps; s++) {
      const batches = await Promise.all(loaders.map((l) => l.next()));
      for (const b of batches) {
        // Each row is the sample's window of the corpus.
        const row = await loaders[0]!.dataset.read(b.sampleIds[0]! * SEQ, SEQ + 1);
        expect(Array.from(b.tokens.subarray(0, SEQ + 1))).toEqual(Array.from(row));
        ids.push(...b.sampleIds);
      }
    }
    const out = { ids, state: loaders[0]!.state(), samplesPerEpoch: loaders[0]!.samplesPerEpoch };
    for (const l of loaders) expect(l.state()).toEqual(out.state);
    await Promise.all(loaders.map((l) => l.close()));
    return out;
  }

  it('the same global order at any size; an interrupted, resized run consumes exactly the same samples', async () => {
    const dir = await corpus();
    const straight = await run(dir, 4, 24);
    const n = straight.samplesPerEpoch;
    expect(straight.ids.length).toBeGreaterThan(2 * n); // crosses epochs
    for (let e = 0; e + 1 <= Math.floor(straight.ids.length / n); e++) {
      expect(new Set(straight.ids.slice(e * n, (e + 1) * n)).size, `epoch ${e} is a permutation`).toBe(n);
    }
    expect((await run(dir, 1, 24)).ids).toEqual(straight.ids);
    const first = await run(dir, 2, 7);
    const rest = await run(dir, 3, 17, first.state);
    const hash = (ids: number[]) => createHash('sha256').update(ids.join(',')).digest('hex');
    expect(hash([...first.ids, ...rest.ids])).toBe(hash(straight.ids));
    expect(rest.state.position).toBe(24 * B);
  });

  it('skip() jumps over global steps without reading them', async () => {
    const dir = await corpus();
    const straight = await run(dir, 2, 10);
    const l = await DataLoader.create(dir, { seqLen: SEQ, globalBatch: B, rank: 1, worldSize: 2, seed: 1234 });
    await l.next();
    l.skip(4);
    const b = await l.next();
    expect(b.step).toBe(5);
    expect(b.sampleIds).toEqual(straight.ids.slice(5 * B + B / 2, 6 * B));
    expect(l.globalIds(5, 6)).toEqual(straight.ids.slice(5 * B, 6 * B));
    await l.close();
  });

  it('refuses a state saved on other data or with another sample length, and bad options', async () => {
    const dir = await corpus();
    const a = await DataLoader.create(dir, { seqLen: SEQ, globalBatch: B, rank: 0, worldSize: 1 });
    const other = await DataLoader.create(join(scratch, 'gpt2'), { seqLen: SEQ, globalBatch: 2, rank: 0, worldSize: 1 });
    await expectCode(() => other.load(a.state()), 'ERR_INVALID_ARGUMENT', /the state was saved on dataset [0-9a-f]{16}\.\.\., this is [0-9a-f]{16}\.\.\. .*resuming would read other samples/);
    const longer = await DataLoader.create(dir, { seqLen: SEQ * 2, globalBatch: B, rank: 0, worldSize: 1 });
    await expectCode(() => longer.load(a.state()), 'ERR_INVALID_ARGUMENT', /the state cut samples of 8 tokens, this loader 16/);
    await expectCode(DataLoader.create(dir, { seqLen: SEQ, globalBatch: 10, rank: 0, worldSize: 3 }), 'ERR_INVALID_ARGUMENT', /globalBatch 10 must divide by the 3 data-parallel ranks/);
    await expectCode(DataLoader.create(dir, { seqLen: 0, globalBatch: B, rank: 0, worldSize: 1 }), 'ERR_INVALID_ARGUMENT', /seqLen must be a positive integer, received 0/);
    await Promise.all([a.close(), other.close(), longer.close()]);
  });
});
