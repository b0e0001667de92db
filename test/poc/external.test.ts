// The POC's stages under an external launcher, the real torchrun (torch's CPU wheel):
// `nccl-node poc stage <name>` as torchrun's workers, then `nccl-node poc finish` in
// one process, as docs/poc.md describes; the report holds the stages that ran.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { torchVenv } from '../launch/torch-venv.js';
import { repoRoot } from '../helpers/ranks.js';

const CLI = join(repoRoot, 'bin/nccl-node.js');

function exec(file: string, args: string[]): Promise<{ code: number; out: string; err: string }> {
  return new Promise((resolve) => {
    execFile(file, args, { cwd: repoRoot, env: { ...process.env, NCCL_NODE_TOKEN: undefined }, timeout: 120_000 }, (e, out, err) => {
      resolve({ code: e ? (typeof e.code === 'number' ? e.code : 1) : 0, out, err });
    });
  });
}

describe('nccl-node poc under the real torchrun', { timeout: 240_000 }, () => {
  it('stage connectivity, pretrain and checkpoint as torchrun workers, then finish: the gates that ran pass', async () => {
    const venv = await torchVenv();
    const dir = mkdtempSync(join(tmpdir(), 'nccl-node-poc-torchrun-'));
    const config = join(dir, 'tiny.json');
    writeFileSync(config, JSON.stringify({ connectivity: { maxBytes: 65536, iters: 2 }, pretrain: { tokens: 8000 } }));
    const flags = ['--out', dir, '--small', '--config', config];
    for (const stage of ['connectivity', 'pretrain', 'checkpoint']) {
      const r = await exec(venv.torchrun, ['--standalone', '--nproc-per-node', '2', '--no-python', 'node', CLI, 'poc', 'stage', stage, ...flags, '--backend', 'gloo']);
      expect(r.code, `${stage}: ${r.err}`).toBe(0);
      const s = JSON.parse(readFileSync(join(dir, `stage-${stage}.json`), 'utf8')) as { worldSize: number };
      expect(s.worldSize).toBe(2);
    }
    const f = await exec(process.execPath, [CLI, 'poc', 'finish', ...flags, '--budget-core-hours', '10']);
    const report = JSON.parse(readFileSync(join(dir, 'report.json'), 'utf8')) as { verdict: string; gates: { stage: string; name: string; verdict: string; note?: string }[] };
    expect(f.code, f.err).toBe(report.verdict === 'fail' ? 1 : 0);
    for (const s of ['connectivity', 'pretrain', 'checkpoint', 'budget']) {
      const gates = report.gates.filter((g) => g.stage === s);
      expect(gates.length, s).toBeGreaterThan(0);
      expect(gates.every((g) => g.verdict === 'pass'), JSON.stringify(gates)).toBe(true);
    }
    expect(report.gates.find((g) => g.name === 'restored run: final parameters bit-exact')!.verdict).toBe('pass');
  });
});
