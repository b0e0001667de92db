/**
 * Starts one process per rank and collects rank 0's JSON lines: the benchmarks that
 * compare the addon with a C++ baseline run both as gangs of plain processes.
 */
import { spawn } from 'node:child_process';

export async function gang<T>(ranks: number, cmd: (rank: number) => [string, string[], NodeJS.ProcessEnv]): Promise<T[]> {
  const outs = await Promise.all(Array.from({ length: ranks }, (_, rank) => new Promise<string>((resolve, reject) => {
    const [file, args, env] = cmd(rank);
    const p = spawn(file, args, { env, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`${file} rank ${rank} exited with ${code}`))));
  })));
  return outs[0]!.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as T);
}
