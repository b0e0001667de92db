#!/usr/bin/env node
// Entry point of the `nccl-node` command: the compiled CLI when built, else the
// TypeScript sources through tsx (a development checkout).
import { existsSync } from 'node:fs';

const dist = new URL('../dist/cli/main.js', import.meta.url);
let cli;
if (existsSync(dist)) {
  cli = await import(dist.href);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  cli = await import(new URL('../src/cli/main.ts', import.meta.url).href);
}
await cli.main(process.argv);
