/**
 * The real torch (the CPU wheel in /opt/wheels) in a Python venv (test/helpers/python.ts),
 * for tests that compare against torchrun and torch.distributed.
 */
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { venvWith } from '../helpers/python.js';

const WHEELS = '/opt/wheels';

export interface TorchVenv {
  dir: string;
  python: string;
  torchrun: string;
}

function wheel(): string {
  const found = existsSync(WHEELS) ? readdirSync(WHEELS).filter((f) => /^torch-[\d.]+\+cpu-.*\.whl$/.test(f)).sort() : [];
  const last = found[found.length - 1];
  if (last === undefined) throw new Error(`no torch-*+cpu-*.whl in ${WHEELS}: these tests need the real torch`);
  return path.join(WHEELS, last);
}

export async function torchVenv(): Promise<TorchVenv> {
  const v = await venvWith([wheel(), 'numpy']);
  return { dir: v.dir, python: v.python, torchrun: v.bin('torchrun') };
}
