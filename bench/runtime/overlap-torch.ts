/**
 * DDP overlap against real torch DDP: the same workload (overlap-torch-worker.ts for
 * nccl-node, overlap_torch.py for torch; gloo, 2 ranks, one compute thread per rank)
 * run by both, alternating gangs round by round so both see the same machine load.
 *
 *   node --import tsx bench/runtime/overlap-torch.ts [--rounds 3] [--layers 24] [--floats 262144]
 *        [--fwd-ms 0.5] [--bwd-ms 1.5] [--steps 15] [--warmup 3] [--caps default,4,1,single]
 *        [--shm] [--out bench/runtime/overlap-torch.json]
 *
 * Per side and bucket cap: fwd+bwd = the step with no gradient sync (torch no_sync());
 * step = the same step with DDP, its wait for the buckets included; exposed = step -
 * fwd+bwd, also as % of the lone all-reduce of every gradient (measured by each side on
 * its own communicator). Medians over steps, then over rounds; spread = min..max over
 * rounds. Without torch (no wheel in /opt/wheels) nccl-node is compared with its own
 * no-overlap mode (cap 'single': one bucket, reduced after backward).
 * OVERLAP_OTHER_NICE=<n> in the environment gives every thread of every rank but its
 * compute thread that nice, on both sides (a diagnostic of scheduling priority).
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { freePort, runRanks } from '../../test/helpers/ranks.js';
import { torchVenv } from '../../test/launch/torch-venv.js';
import { gang } from '../gang.js';
import type { OverlapPayload, SideResult } from './overlap-torch-worker.js';
import { median } from '../stats.js';

const { values: a } = parseArgs({
  options: {
    rounds: { type: 'string', default: '3' },
    layers: { type: 'string', default: '24' },
    floats: { type: 'string', default: '262144' },
    'fwd-ms': { type: 'string', default: '0.5' },
    'bwd-ms': { type: 'string', default: '1.5' },
    steps: { type: 'string', default: '15' },
    warmup: { type: 'string', default: '3' },
    caps: { type: 'string', default: 'default,4,1,single' },
    // Also run nccl-node with the shared-memory path inside the host (opt-in, docs/gloo.md).
    shm: { type: 'boolean', default: false },
    out: { type: 'string', default: 'bench/runtime/overlap-torch.json' },
  },
});
const RANKS = 2;
const payload: OverlapPayload = {
  layers: Number(a.layers),
  layerFloats: Number(a.floats),
  fwdMs: Number(a['fwd-ms']),
  bwdMs: Number(a['bwd-ms']),
  steps: Number(a.steps),
  warmup: Number(a.warmup),
  caps: a.caps!.split(',').map((c) => (/^[\d.]+$/.test(c) ? Number(c) : c)),
};
const worker = fileURLToPath(new URL('./overlap-torch-worker.ts', import.meta.url));
const script = fileURLToPath(new URL('./overlap_torch.py', import.meta.url));

let torch: Awaited<ReturnType<typeof torchVenv>> | null = null;
let torchMissing = '';
try {
  torch = await torchVenv();
} catch (e) {
  torchMissing = (e as Error).message.split('\n')[0]!;
}

async function runNode(env: Record<string, string> = {}): Promise<SideResult[]> {
  const out = await runRanks<SideResult>(worker, RANKS, { payload, env, check: true, timeoutMs: 170_000 });
  return out.map((o) => o.result!);
}

async function runTorch(): Promise<SideResult[]> {
  const port = await freePort();
  const [line] = await gang<SideResult[]>(RANKS, (rank) => [torch!.python, [script], {
    ...process.env,
    RANK: String(rank),
    WORLD_SIZE: String(RANKS),
    MASTER_ADDR: '127.0.0.1',
    MASTER_PORT: String(port),
    GLOO_SOCKET_IFNAME: 'lo',
    OMP_NUM_THREADS: '1',
    NCCL_NODE_TEST_PAYLOAD: JSON.stringify(payload),
  }]);
  return line!;
}

const SHM = 'nccl-node NCCL_NODE_SHM=1';
const sides = [...(torch ? ['nccl-node', 'torch'] : ['nccl-node']), ...(a.shm ? [SHM] : [])];
const rounds: Record<string, SideResult[][]> = Object.fromEntries(sides.map((s) => [s, []]));
for (let r = 0; r < Number(a.rounds); r++) {
  // Alternate which side runs first, so neither always gets the fresher machine.
  for (const side of r % 2 === 0 ? sides : [...sides].reverse()) {
    const t0 = performance.now();
    // The plain nccl-node side is pinned to Gloo TCP: shared memory is the default within a host.
    rounds[side]!.push(side === 'torch' ? await runTorch() : await runNode({ NCCL_NODE_SHM: side === SHM ? '1' : '0' }));
    process.stderr.write(`round ${r + 1} ${side}: ${((performance.now() - t0) / 1000).toFixed(1)} s\n`);
  }
}

const meanRanks = (rs: SideResult[], f: (r: SideResult) => number) => rs.reduce((s, r) => s + f(r), 0) / rs.length;
const r1 = (x: number) => +x.toFixed(1);

type Row = { side: string; cap: string; buckets: string; fwdBwdMs: number; loneAllReduceMs: number; commShare: string; stepMs: number; exposedMs: number; exposedPct: number; spreadPct: string; otherThreadsCpuMs: number; otherThreadsWaitMs: number; mainWaitMs: number };
const rows: Row[] = [];
for (const side of sides) {
  const rs = rounds[side]!;
  // Per round: mean over ranks of each rank's median.
  const compute = rs.map((x) => meanRanks(x, (r) => r.stepMs.nosync!));
  const lone = rs.map((x) => meanRanks(x, (r) => r.loneAllReduceMs));
  for (const cap of payload.caps.map(String)) {
    const steps = rs.map((x) => meanRanks(x, (r) => r.stepMs[cap]!));
    const pct = steps.map((s, i) => (100 * (s - compute[i]!)) / lone[i]!);
    const b = rs[0]![0]!.bucketBytes[cap] ?? [];
    rows.push({
      side,
      cap: cap === 'default' ? '1/25 MiB (default)' : cap === 'single' ? 'one bucket after backward' : `${cap} MiB`,
      buckets: b.length ? `${b.length}: ${b.map((x) => +(x / 2 ** 20).toFixed(1)).join('+')} MiB` : '?',
      fwdBwdMs: r1(median(compute)),
      loneAllReduceMs: r1(median(lone)),
      commShare: `${Math.round((100 * median(lone)) / median(compute))} %`,
      stepMs: r1(median(steps)),
      exposedMs: r1(median(steps) - median(compute)),
      exposedPct: r1(median(pct)),
      spreadPct: `${r1(Math.min(...pct))}..${r1(Math.max(...pct))}`,
      // Per step, from the kernel's schedstat: the threads other than the compute
      // thread (the communicator's) and how long they sat runnable without a core.
      otherThreadsCpuMs: r1(median(rs.map((x) => meanRanks(x, (r) => r.sched[cap]!.otherCpu)))),
      otherThreadsWaitMs: r1(median(rs.map((x) => meanRanks(x, (r) => r.sched[cap]!.otherWait)))),
      mainWaitMs: r1(median(rs.map((x) => meanRanks(x, (r) => r.sched[cap]!.mainWait)))),
    });
  }
}
// nccl-node over torch per cap: exposed ms and step ms.
const ratios = torch
  ? Object.fromEntries(sides.filter((s) => s !== 'torch').map((side) => [side, Object.fromEntries(payload.caps.map(String).map((cap, i) => {
    const n = rows.filter((r) => r.side === side)[i]!, t = rows.filter((r) => r.side === 'torch')[i]!;
    return [cap, { exposed: +(n.exposedMs / t.exposedMs).toFixed(2), step: +(n.stepMs / t.stepMs).toFixed(3) }];
  }))]))
  : null;
console.table(rows);
if (ratios) for (const [side, r] of Object.entries(ratios)) console.log(`${side} / torch per cap (exposed ms, step ms): ${JSON.stringify(r)}`);
else console.log(`torch is not available (${torchMissing}): compared with nccl-node's own no-overlap mode (row 'one bucket after backward')`);
const report = {
  bench: 'runtime-overlap-torch',
  date: new Date().toISOString(),
  ranks: RANKS,
  payload,
  gradientMiB: +((payload.layers * payload.layerFloats * 4) / 2 ** 20).toFixed(2),
  reference: torch ? `torch ${rounds.torch![0]![0]!.version ?? ''} DDP (gloo)` : `none: ${torchMissing}`,
  unitsPerLayer: Object.fromEntries(sides.map((s) => [s, rounds[s]![0]![0]!.unitsPerLayer])),
  rows,
  ratios,
  lastStep: rounds['nccl-node']!.at(-1)![0]!.lastStep,
  // Every round's per-rank results, without the bucket timelines (lastStep above has one).
  raw: Object.fromEntries(Object.entries(rounds).map(([k, v]) => [k, v.map((ranks) => ranks.map(({ lastStep: _, ...r }) => r))])),
};
writeFileSync(a.out!, JSON.stringify(report, null, 2) + '\n');
console.log(`wrote ${a.out}`);
