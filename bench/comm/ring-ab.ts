/**
 * The backend's own TCP ring against each of Gloo's algorithms, interleaved: every
 * block runs each variant in the same processes (build/ring_ab, bench/ring_ab.cpp),
 * and per (ranks, collective, size) this script takes, for each Gloo algorithm, the
 * median over blocks of the ratio own ring / algorithm in the same block. The
 * strongest algorithm is the one with the highest median ratio; the verdict is
 * `faster` when that ratio is at most 1 (the own ring took at most the time of every
 * Gloo algorithm in the typical block), else `SLOWER`. bench/comm/sweep.ts compares
 * the addon with the fastest of Gloo's separately timed medians; this one answers
 * whether the algorithm the addon runs beyond the mesh round is the right one, free of
 * that minimum's bias and of the host's slow and fast minutes. float32 sum, over TCP
 * on loopback. A benchmark, not a test; table and JSON.
 *
 *   node --import tsx bench/comm/ring-ab.ts [--ranks 2,4] [--sizes 8M,32M,128M,256M]
 *        [--blocks 7] [--calls 3] [--json bench/comm/ring-ab.json]
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gang } from '../gang.js';
import { median } from '../stats.js';
import { arg, bytesOf } from '../args.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const RANKS = arg('--ranks', '2,4').split(',').map(Number);
const SIZES = arg('--sizes', '8M,32M,128M,256M').split(',').map(bytesOf);
const BLOCKS = Number(arg('--blocks', '7'));
const CALLS = Number(arg('--calls', '3'));
const JSON_OUT = arg('--json', join(ROOT, 'bench/comm/ring-ab.json'));

interface Line { coll: string; algo: string; size: number; calls: number; us: number[] }
const OWN = 'own-tcp-ring';
const r3 = (x: number): number => Number(x.toFixed(3));
const r1 = (x: number): number => Number(x.toFixed(1));
const human = (b: number): string => (b >= 1 << 20 ? `${b / 2 ** 20}M` : b >= 1024 ? `${b / 1024}K` : `${b}`);

async function run(bin: string, ranks: number, size: number): Promise<Line[]> {
  const dir = mkdtempSync(join(tmpdir(), 'ring-ab-'));
  try {
    return await gang<Line>(ranks, (rank) => [bin, [String(rank), String(ranks), dir, String(size), String(BLOCKS), String(CALLS)], process.env]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// After every size: a long run that fails late keeps what it measured.
function write(rows: object[]): void {
  const doc = { bench: 'ring-ab', dtype: 'float32', op: 'sum', blocks: BLOCKS, calls: CALLS, node: process.version, rows };
  writeFileSync(JSON_OUT, `${JSON.stringify(doc, null, 1)}\n`);
}

async function main(): Promise<void> {
  const bin = [process.env.RING_AB, join(ROOT, 'build/ring_ab')].find((p) => p && existsSync(p));
  if (!bin) throw new Error('build/ring_ab is missing: build with scripts/setup.sh (NCCL_NODE_DEV)');
  const rows = [];
  for (const ranks of RANKS) {
    for (const size of SIZES) {
      const lines = await run(bin, ranks, size);
      for (const coll of ['allreduce', 'allgather', 'reducescatter']) {
        const own = lines.find((l) => l.coll === coll && l.algo === OWN)!;
        const against = lines.filter((l) => l.coll === coll && l.algo !== OWN).map((l) => {
          const ratios = l.us.map((us, b) => own.us[b]! / us);
          return { algo: l.algo, us: r1(median(l.us)), ratio: r3(median(ratios)), min: r3(Math.min(...ratios)), max: r3(Math.max(...ratios)),
            ownFasterBlocks: ratios.filter((x) => x <= 1).length };
        });
        const strongest = against.reduce((a, b) => (b.ratio > a.ratio ? b : a));
        rows.push({ ranks, coll, size, ownUs: r1(median(own.us)), strongest: strongest.algo, strongestUs: strongest.us,
          ratio: strongest.ratio, range: `${strongest.min}-${strongest.max}`, ownFasterBlocks: `${strongest.ownFasterBlocks}/${BLOCKS}`,
          verdict: strongest.ratio <= 1 ? 'faster' : 'SLOWER', against });
      }
      process.stderr.write(`ring-ab: ${ranks} ranks, ${human(size)} done: ${rows.slice(-3).map((r) => `${r.coll} ${r.ratio}`).join(', ')}\n`);
      write(rows);
    }
  }
  console.log(`# own TCP ring / Gloo's strongest algorithm for it, float32 sum, loopback: median of ${BLOCKS} block ratios (range), ${CALLS} calls a block`);
  console.table(rows.map((r) => ({ ranks: r.ranks, coll: r.coll, size: human(r.size), ownUs: r.ownUs, strongest: r.strongest,
    strongestUs: r.strongestUs, ratio: r.ratio, range: r.range, ownFasterBlocks: r.ownFasterBlocks, verdict: r.verdict })));
  write(rows);
  console.log(`wrote ${JSON_OUT}`);
}

await main();
