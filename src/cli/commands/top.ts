/**
 * `nccl-node top`: a live view of a running job, per rank, from the ranks' metrics
 * endpoints (src/metrics/top.ts). Exit codes: 0, or with --once 1 when a rank is
 * down; 2 bad usage.
 */
import type { Command } from 'commander';
import logUpdate from 'log-update';
import { renderTop, scrapeJob, targetsFor } from '../../metrics/top.js';

interface TopOptions {
  port?: number;
  hosts: string;
  nprocPerNode: number;
  interval: number;
  timeout: number;
  once: boolean;
  json: boolean;
}

const positive = (what: string) => (v: string): number => {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`${what} must be a positive number, received ${JSON.stringify(v)}`);
  return n;
};

export function registerTopCommand(program: Command): void {
  program.command('top [targets...]')
    .description("a live per-rank view of a running job: step, loss, step time, comm share, throughput, MFU, memory, straggler verdict, loss and SDC events; from the ranks' --metrics-port endpoints")
    .option('--port <n>', 'the first rank\'s metrics port (rank with LOCAL_RANK r serves on port + r)', positive('--port'))
    .option('--hosts <list>', 'comma-separated hosts serving ranks (with --port)', 'localhost')
    .option('--nproc-per-node <n>', 'ranks per host (with --port)', positive('--nproc-per-node'), 1)
    .option('--interval <s>', 'seconds between refreshes', positive('--interval'), 1)
    .option('--timeout <ms>', 'how long one scrape may take before the rank counts as down', positive('--timeout'), 2000)
    .option('--once', 'print one view and exit (1 when a rank is down)', false)
    .option('--json', 'JSON instead of the table', false)
    .addHelpText('after', '\nTargets: URLs (http://host:port/metrics) or host:port; or --port with --hosts and --nproc-per-node.\nExample: nccl-node top --port 9400 --nproc-per-node 8 --hosts node1,node2')
    .action(async (given: string[], o: TopOptions) => {
      const targets = [
        ...given.map((t) => (t.startsWith('http') ? t : `http://${t}/metrics`)),
        ...(o.port !== undefined ? targetsFor(o.hosts.split(',').filter(Boolean), o.port, o.nprocPerNode) : []),
      ];
      if (targets.length === 0) {
        process.stderr.write('nccl-node top: give targets (host:port or URLs) or --port\n');
        process.exitCode = 2;
        return;
      }
      const show = async (): Promise<boolean> => {
        const job = await scrapeJob(targets, o.timeout);
        const text = o.json ? `${JSON.stringify(job)}\n` : renderTop(job);
        if (o.once || o.json || !process.stdout.isTTY) process.stdout.write(text);
        else logUpdate(text);
        return job.up === job.ranks.length;
      };
      if (o.once) {
        if (!(await show())) process.exitCode = 1;
        return;
      }
      const stop = new AbortController();
      process.once('SIGINT', () => stop.abort());
      while (!stop.signal.aborted) {
        await show();
        await new Promise((r) => { const t = setTimeout(r, o.interval * 1000); stop.signal.addEventListener('abort', () => (clearTimeout(t), r(undefined)), { once: true }); });
      }
      if (process.stdout.isTTY && !o.json) logUpdate.done();
    });
}
