#!/usr/bin/env node
// Entry point of the `nccl-node` command: in a source checkout the TypeScript
// sources through tsx (so a stale dist/ never shadows them), in an installed
// package the compiled CLI (no tsx, no sources needed).
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const source = new URL('../src/cli/main.ts', import.meta.url);
let cli;
if (existsSync(source)) {
  // The checkout's tsconfig maps 'nccl-node' to src/ (examples import the package
  // by name); rank processes inherit the variable, whatever their working directory.
  process.env.TSX_TSCONFIG_PATH ??= fileURLToPath(new URL('../tsconfig.json', import.meta.url));
  const { register } = await import('tsx/esm/api');
  register();
  cli = await import(source.href);
} else {
  cli = await import(new URL('../dist/cli/main.js', import.meta.url).href);
}
await cli.main(process.argv);
