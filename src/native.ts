/**
 * Loads the addon. Its surface is typed in native/contract.ts (re-exported here);
 * everything else in src/ gets the binding from here and never loads the .node
 * file itself.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NcclNodeError } from './errors.js';
import type { Binding } from './native/contract.js';

export * from './native/contract.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, '..');
const CANDIDATES = [
  'build/Release/nccl_node.node',
  'build/Debug/nccl_node.node',
];

let cached: Binding | undefined;

/** Loads the addon once; a missing build is an error that says how to make one. */
export function binding(): Binding {
  if (cached) return cached;
  const override = process.env.NCCL_NODE_ADDON;
  const paths = override ? [override] : CANDIDATES.map((p) => join(root, p));
  const require = createRequire(import.meta.url);
  const errors: string[] = [];
  for (const path of paths) {
    if (!existsSync(path)) {
      errors.push(`${path}: not found`);
      continue;
    }
    try {
      const loaded = require(path) as Binding;
      // Native code throws and rejects with NcclNodeErrors from here on, each with its code.
      loaded.setErrorConstructor(NcclNodeError);
      cached = loaded;
      return cached;
    } catch (err) {
      errors.push(`${path}: ${(err as Error).message}`);
    }
  }
  throw new NcclNodeError(
    'ERR_UNAVAILABLE',
    `the nccl-node addon could not be loaded.\n  Tried:\n    ${errors.join('\n    ')}\n` +
      '  Possible solutions:\n' +
      '    - installed package: npm rebuild nccl-node (needs cmake, g++ and libgloo-dev)\n' +
      '    - checkout: npm run build:native, or bash scripts/setup.sh, which installs what is missing',
  );
}
