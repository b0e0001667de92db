/**
 * The package as users get it: `npm pack` the checkout, install the tarball into a
 * scratch project outside it (npm runs the addon build), then use it from there —
 * a 2-rank all-reduce and a checkpoint through the installed launcher, 2 ranks without it
 * (rank 0's store on its own thread, from the compiled worker file), ESM,
 * CommonJS (await import) and strict TypeScript (nodenext), every `exports`
 * subpath, and every name the docs and examples import from the package.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../helpers/ranks.js';

const repo = fileURLToPath(new URL('../..', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'nn-pkg-'));
const app = join(scratch, 'app');
const installed = join(app, 'node_modules', 'nccl-node');
const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

function run(cmd: string, args: string[], cwd: string, timeout = 300_000) {
  const r = spawnSync(cmd, args, { cwd, encoding: 'utf8', timeout, env: { ...process.env, NCCL_NODE_ADDON: '' } });
  return { code: r.status, out: r.stdout, err: r.stderr, all: `${r.stdout}\n${r.stderr}` };
}

/** `import { a, type B, c as d } from 'nccl-node...'` statements in docs and examples. */
function documentedImports(): Array<{ file: string; spec: string; values: string[]; text: string }> {
  const files = [join(repo, 'README.md'), ...readdirSync(join(repo, 'docs')).map((f) => join(repo, 'docs', f))];
  const walk = (d: string): string[] =>
    readdirSync(d, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(d, e.name)) : e.name.endsWith('.ts') ? [join(d, e.name)] : []));
  files.push(...walk(join(repo, 'examples')));
  const found = [];
  for (const file of files) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/import\s+(type\s+)?\{([^}]*)\}\s+from\s+'(nccl-node[^']*)'/g)) {
      const names = m[2]!.split(',').map((n) => n.trim()).filter(Boolean);
      const values = m[1] ? [] : names.filter((n) => !n.startsWith('type ')).map((n) => n.split(/\s+as\s+/)[0]!);
      found.push({ file: file.slice(repo.length), spec: m[3]!, values, text: m[0] });
    }
  }
  return found;
}

let installSeconds = 0;

beforeAll(() => {
  const pack = run('npm', ['pack', '--json', '--pack-destination', scratch], repo);
  expect(pack.code, pack.all).toBe(0);
  const tarball = join(scratch, (JSON.parse(pack.out) as Array<{ filename: string }>)[0]!.filename);
  mkdirSync(app);
  writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true }));
  const t0 = performance.now();
  const inst = run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', tarball, '@types/node@20'], app, 600_000);
  installSeconds = (performance.now() - t0) / 1000;
  expect(inst.code, inst.all).toBe(0);
  console.log(`npm install of the packed tarball (addon build included): ${installSeconds.toFixed(1)} s`);
}, 900_000);

describe('the installed package', { timeout: 300_000 }, () => {
  it('holds the built addon, no development targets, no sources; LICENSE and repository', () => {
    expect(existsSync(join(installed, 'build', 'Release', 'nccl_node.node'))).toBe(true);
    expect(existsSync(join(installed, 'build', 'standins'))).toBe(false);
    expect(existsSync(join(installed, 'build', 'gloo_direct'))).toBe(false);
    for (const dev of ['src', 'test', 'bench', 'examples']) expect(existsSync(join(installed, dev)), dev).toBe(false);
    expect(readFileSync(join(installed, 'LICENSE'), 'utf8')).toMatch(/^MIT License/);
    const pkg = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8'));
    expect(pkg.license).toBe('MIT');
    expect(pkg.repository?.url).toMatch(/^git\+https:\/\//);
  });

  it('npx nccl-node run: a 2-rank all-reduce and a checkpoint save/load', () => {
    writeFileSync(join(app, 'job.mjs'), `
import { init } from 'nccl-node';
import { Checkpointer, load } from 'nccl-node/checkpoint';
const comm = await init();
const x = Float32Array.from([1, 2, 3, 4], (v) => v * (comm.rank + 1));
await comm.allReduce(x);
// a global [8] tensor, half on each rank; each rank then reads the other's half back
const full = Float32Array.from({ length: 8 }, (_, i) => i * 1.5 - 2);
const mine = full.slice(comm.rank * 4, comm.rank * 4 + 4);
const ck = await Checkpointer.create(process.argv[2], { comm });
const h = await ck.save({ tensors: { w: { data: mine, globalShape: [8], offset: comm.rank * 4 } }, train: { step: 7 } });
await h.committed;
await ck.close();
await comm.barrier();
const other = 1 - comm.rank;
const back = new Float32Array(4);
const r = await load(process.argv[2], { w: { data: back, offset: other * 4 } });
console.log('RESULT ' + JSON.stringify({ rank: comm.rank, sum: [...x], loaded: [...back], step: r.train.step }));
await comm.destroy();
`);
    // A JavaScript job needs neither tsx nor the TypeScript sources: hide tsx while it runs.
    const tsx = join(app, 'node_modules', 'tsx');
    renameSync(tsx, `${tsx}.hidden`);
    let r;
    try {
      r = run('npx', ['--no-install', 'nccl-node', 'run', '--nproc-per-node', '2', 'job.mjs', join(scratch, 'ckpt')], app, 120_000);
    } finally {
      renameSync(`${tsx}.hidden`, tsx);
    }
    expect(r.code, r.all).toBe(0);
    const results = [...r.out.matchAll(/RESULT (.*)/g)].map((m) => JSON.parse(m[1]!)).sort((a, b) => a.rank - b.rank);
    expect(results).toEqual([0, 1].map((rank) => ({
      rank,
      sum: [3, 6, 9, 12],
      loaded: Array.from({ length: 4 }, (_, i) => ((1 - rank) * 4 + i) * 1.5 - 2),
      step: 7,
    })));
  });

  it('without a launcher, rank 0 serves the store from its thread (the compiled worker file) while its JS thread is held', async () => {
    // Rank 0 holds its JS thread 2 s right after init, as a blocking call waiting for its
    // peers does; rank 1 uses the store meanwhile, then both make a blocking all-reduce.
    writeFileSync(join(app, 'held.mjs'), `
import { init, StoreClient } from 'nccl-node';
const comm = await init({ backend: 'gloo' });
let storeMs = null;
if (comm.rank === 0) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2000);
} else {
  await new Promise((r) => setTimeout(r, 200));
  const t0 = performance.now();
  const c = await StoreClient.connect({ host: '127.0.0.1', port: Number(process.env.MASTER_PORT), token: process.env.NCCL_NODE_TOKEN, clientName: 'held', connectTimeoutMs: 10000 });
  await c.set('held/k', 'v');
  await c.get('held/k');
  storeMs = performance.now() - t0;
  await c.close();
}
const sum = comm.allReduceSync(new Float32Array([comm.rank + 1]))[0];
console.log('RESULT ' + JSON.stringify({ rank: comm.rank, sum, storeMs }));
await comm.destroy();
`);
    const port = await freePort();
    const tsx = join(app, 'node_modules', 'tsx');
    renameSync(tsx, `${tsx}.hidden`);
    let r;
    try {
      const env = `WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=${port} NCCL_NODE_TOKEN=held-token`;
      r = run('sh', ['-c', `export ${env}; RANK=0 node held.mjs & p=$!; RANK=1 node held.mjs; b=$?; wait $p; a=$?; exit $((a | b))`], app, 60_000);
    } finally {
      renameSync(`${tsx}.hidden`, tsx);
    }
    expect(r.code, r.all).toBe(0);
    const results = [...r.out.matchAll(/RESULT (.*)/g)].map((m) => JSON.parse(m[1]!)).sort((a, b) => a.rank - b.rank);
    expect(results.map((x) => x.sum)).toEqual([3, 3]);
    // Answered within rank 0's 2 s hold (it began 200 ms in), not after it.
    expect(results[1].storeMs).toBeLessThan(1000);
  });

  it('npx nccl-node bench runs from the installed package', () => {
    const r = run('npx', ['--no-install', 'nccl-node', 'bench', 'all_reduce', '-b', '8', '-e', '64', '-f', '8', '-n', '1', '--nproc-per-node', '2'], app, 120_000);
    expect(r.code, r.all).toBe(0);
    expect(r.out).toMatch(/# Out of bounds values : 0 OK\n/);
    expect(r.out.split('\n').filter((l) => /^\s+\d+\s+\d+\s+float\s+sum/.test(l))).toHaveLength(2);
  });

  it('every exports subpath loads from ESM and from CommonJS (await import)', () => {
    const pkg = JSON.parse(readFileSync(join(installed, 'package.json'), 'utf8'));
    const subpaths = Object.keys(pkg.exports).filter((s) => s !== './package.json');
    expect(subpaths).toEqual(expect.arrayContaining(['.', './checkpoint', './runtime', './bench']));
    const specs = subpaths.map((s) => `nccl-node${s.slice(1)}`);
    const body = `
const specs = ${JSON.stringify(specs)};
const out = {};
for (const s of specs) out[s] = Object.keys(await import(s)).length;
console.log(JSON.stringify(out));`;
    writeFileSync(join(app, 'load.mjs'), body);
    writeFileSync(join(app, 'load.cjs'), `(async () => {${body}\n})().catch((e) => { console.error(e); process.exit(1); });`);
    for (const f of ['load.mjs', 'load.cjs']) {
      const r = run(process.execPath, [f], app);
      expect(r.code, `${f}: ${r.all}`).toBe(0);
      const counts = JSON.parse(r.out) as Record<string, number>;
      for (const s of specs) expect(counts[s], `${f} ${s}`).toBeGreaterThan(0);
    }
    // The addon is found from the installed package (not from the checkout).
    const probe = run(process.execPath, ['--input-type=module', '-e', "const m = await import('nccl-node'); console.log(m.floatToBf16(1.5), typeof m.gpuInfo)"], app);
    expect(probe.code, probe.all).toBe(0);
  });

  it('every name the docs and examples import from the package exists there', () => {
    const imports = documentedImports();
    expect(imports.length).toBeGreaterThan(3);
    const specs = [...new Set(imports.map((i) => i.spec))];
    writeFileSync(join(app, 'names.mjs'), `
const out = {};
for (const s of ${JSON.stringify(specs)}) out[s] = Object.keys(await import(s));
console.log(JSON.stringify(out));`);
    const r = run(process.execPath, ['names.mjs'], app);
    expect(r.code, r.all).toBe(0);
    const names = JSON.parse(r.out) as Record<string, string[]>;
    const missing = imports.flatMap((i) => i.values.filter((v) => !names[i.spec]!.includes(v)).map((v) => `${i.file}: ${v} from ${i.spec}`));
    expect(missing).toEqual([]);
    // types too: every documented import statement through tsc against the installed types
    const aliased = (i: (typeof imports)[number], k: number) => {
      const names = i.text.slice(i.text.indexOf('{') + 1, i.text.indexOf('}')).split(',').map((n) => n.trim()).filter(Boolean);
      const each = names.map((n) => {
        const [, type, name] = /^(type\s+)?(\w+)/.exec(n)!;
        return `${type ?? ''}${name} as _${k}_${name}`;
      });
      return `import ${i.text.startsWith('import type') ? 'type ' : ''}{ ${each.join(', ')} } from '${i.spec}';`;
    };
    writeFileSync(join(app, 'documented.mts'), `${imports.map(aliased).join('\n')}\nexport {};\n`);
    writeFileSync(join(app, 'tsconfig.json'), JSON.stringify({
      compilerOptions: { strict: true, module: 'nodenext', moduleResolution: 'nodenext', target: 'es2022', noEmit: true, types: ['node'], skipLibCheck: false },
      files: ['documented.mts', 'typed.mts'],
    }));
    writeFileSync(join(app, 'typed.mts'), `
import { init, NcclNodeError, type Communicator, type InitOptions } from 'nccl-node';
import { Checkpointer, type SaveHandle } from 'nccl-node/checkpoint';
import { DistributedDataParallel, type DDPOptions } from 'nccl-node/runtime';
import { getFloatStr, compareDocs } from 'nccl-node/bench';
export async function main(): Promise<number> {
  const options: InitOptions = { backend: 'gloo', timeoutMs: 1000 };
  const comm: Communicator = await init(options);
  const ck: Checkpointer = await Checkpointer.create('ckpt', { comm });
  const h: SaveHandle = await ck.save({ tensors: {}, train: { step: 1 } });
  const ddp: DDPOptions = { bucketBytes: 1 << 20 };
  const text: string = getFloatStr(1.5, 7);
  void [h, ddp, text, DistributedDataParallel, compareDocs, NcclNodeError];
  // @ts-expect-error the types are real: a backend name is a string
  await init({ backend: 42 });
  return comm.rank;
}
`);
    const t = run(process.execPath, [tsc, '-p', 'tsconfig.json'], app);
    expect(t.code, t.all).toBe(0);
  });
});
