#!/usr/bin/env node
// Entry point of the `nccl-node` command: in a source checkout the TypeScript
// sources through tsx (so a stale dist/ never shadows them), in an installed
// package the compiled CLI.
import { existsSync } from 'node:fs';

const source = new URL('../src/cli/main.ts', import.meta.url);
let cli;
if (existsSync(source)) {
  const { register } = await import('tsx/esm/api');
  register();
  cli = await import(source.href);
} else {
  cli = await import(new URL('../dist/cli/main.js', import.meta.url).href);
}
await cli.main(process.argv);
