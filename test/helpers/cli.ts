/**
 * The command line as a user runs it: `node bin/nccl-node.js ...` from the checkout,
 * without an inherited NCCL_NODE_TOKEN, its output collected; killed after a deadline
 * so a hang fails the test instead of stalling it.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const BIN = path.join(ROOT, 'bin/nccl-node.js');

export interface CliResult {
  code: number | null;
  out: string;
  err: string;
}

/** Runs `file args` from the checkout without an inherited NCCL_NODE_TOKEN, collecting its output; SIGKILL after timeoutMs. */
export function runProcess(file: string, args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 60_000): Promise<CliResult> {
  return new Promise((resolve) => {
    const child = spawn(file, args, { cwd: ROOT, env: { ...process.env, NCCL_NODE_TOKEN: undefined, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
}

/** `node bin/nccl-node.js args`. */
export function runCli(args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 60_000): Promise<CliResult> {
  return runProcess(process.execPath, [BIN, ...args], env, timeoutMs);
}

/** Whether a process exists (EPERM: it does, owned by someone else). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
