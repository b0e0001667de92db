/**
 * Checkpoint write/read throughput at 1, 2 and 4 ranks against the disk's own
 * sequential O_DIRECT bandwidth (dd, measured in the same run), and the stall of
 * an async save against a synchronous one.
 *
 *   NCCL_NODE_ADDON=... node --import tsx bench/checkpoint/throughput.ts [--gib 1,2,4] [--ranks 1,2,4] [--dir D] [--json out.json]
 * Default: 0.25 GiB (fits small machines); the sizes with --gib 1,2,4.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { runRanks } from '../../test/helpers/ranks.js';

const { values } = parseArgs({ options: { gib: { type: 'string', default: '0.25' }, ranks: { type: 'string', default: '1,2,4' }, dir: { type: 'string', default: '/var/tmp' }, json: { type: 'string' } } });
const sizes = values.gib.split(',').map(Number);
const rankCounts = values.ranks.split(',').map(Number);
const base = mkdtempSync(join(values.dir, 'ckpt-bench-'));

/** dd with O_DIRECT and a final fsync: the ceiling a writer on this disk can reach. */
function ddBandwidth(bytes: number): { write: number; read: number } {
  const f = join(base, 'dd.bin');
  const count = Math.max(1, Math.round(bytes / (8 << 20)));
  const run = (args: string[]) => execFileSync('dd', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  const t0 = performance.now();
  run(['if=/dev/zero', `of=${f}`, 'bs=8M', `count=${count}`, 'oflag=direct', 'conv=fsync']);
  const w = (count * (8 << 20)) / ((performance.now() - t0) / 1000);
  const t1 = performance.now();
  run([`if=${f}`, 'of=/dev/null', 'bs=8M', 'iflag=direct']);
  const r = (count * (8 << 20)) / ((performance.now() - t1) / 1000);
  rmSync(f);
  return { write: w, read: r };
}

const GB = 1e9;
const rows: Record<string, unknown>[] = [];
try {
  for (const gib of sizes) {
    const bytes = Math.round(gib * 2 ** 30);
    const dd = ddBandwidth(bytes);
    for (const ranks of rankCounts) {
      const dir = join(base, `g${gib}-r${ranks}`);
      const res = await runRanks('bench/checkpoint/worker.ts', ranks, { env: { BYTES: String(bytes), CKPT_DIR: dir }, timeoutMs: 600_000 });
      if (res.some((r) => r.code !== 0)) throw new Error(res.map((r) => r.stderr).join('\n'));
      const rep = res.map((r) => r.reports[0] as Record<string, number>);
      const max = (k: string) => Math.max(...rep.map((x) => x[k]!));
      const total = rep[0]!.bytes!; // the commit reports the job's total on every rank
      const write = total / (max('syncMs') / 1000);
      const read = rep.reduce((a, x) => a + x.bytesRead!, 0) / (max('loadMs') / 1000);
      rows.push({
        gib, ranks, bytes: total, ddWriteGBs: dd.write / GB, ddReadGBs: dd.read / GB,
        writeGBs: write / GB, writePctOfDd: (100 * write) / dd.write,
        // Background part only (shard write + exchange + manifest commit), without the snapshot copy.
        commitGBs: total / (max('warmCommitMs') / 1000) / GB, commitPctOfDd: (100 * total) / (max('warmCommitMs') / 1000) / dd.write, readGBs: read / GB, readPctOfDd: (100 * read) / dd.read,
        syncSaveMs: max('syncMs'), asyncStallColdMs: max('coldStallMs'), asyncStallWarmMs: max('warmStallMs'),
        stallPctOfSync: (100 * max('warmStallMs')) / max('syncMs'),
        // Overlapped save: the caller is blocked for the call only, provided its next
        // forward+backward lasts at least overlapSnapshotMs.
        overlapCallMs: max('overlapCallMs'), overlapStallPctOfSync: (100 * max('overlapCallMs')) / max('syncMs'),
        overlapSnapshotMs: max('overlapSnapshotMs'), direct: rep.every((x) => x.direct),
      });
      rmSync(dir, { recursive: true, force: true });
    }
  }
} finally {
  rmSync(base, { recursive: true, force: true });
}
const f = (x: unknown, d = 2) => (typeof x === 'number' ? x.toFixed(d) : String(x));
console.log('GiB ranks | dd write GB/s  ckpt write GB/s (%dd)  commit-only GB/s (%dd) | dd read GB/s  ckpt read GB/s (%dd) | sync save ms  async stall cold/warm ms (% of sync) | overlapped: call ms (% of sync), snapshot ms | O_DIRECT');
for (const r of rows) {
  console.log(`${f(r.gib)} ${r.ranks} | ${f(r.ddWriteGBs)}  ${f(r.writeGBs)} (${f(r.writePctOfDd, 0)}%)  ${f(r.commitGBs)} (${f(r.commitPctOfDd, 0)}%) | ${f(r.ddReadGBs)}  ${f(r.readGBs)} (${f(r.readPctOfDd, 0)}%) | ${f(r.syncSaveMs, 0)}  ${f(r.asyncStallColdMs, 1)}/${f(r.asyncStallWarmMs, 1)} (${f(r.stallPctOfSync, 1)}%) | ${f(r.overlapCallMs, 1)} (${f(r.overlapStallPctOfSync, 1)}%), ${f(r.overlapSnapshotMs, 0)} | ${r.direct}`);
}
const out = { date: new Date().toISOString(), host: { cpus: (await import('node:os')).cpus().length }, rows };
if (values.json) writeFileSync(values.json, JSON.stringify(out, null, 2));
