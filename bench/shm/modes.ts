/**
 * The small all-reduce within a host against Open MPI's shared memory, block by block,
 * each block classified by the host's mode at that moment. Some hosts (the Zen 5 VM of
 * bench/README.md) switch every few seconds between a mode where two vCPUs exchange a
 * cache line about 3x faster and one where they do not, and a comparison of runs made
 * seconds apart can pit one mode against the other. Here one pair of addon ranks stays
 * up and, block after block, rank 0 runs in turn: the shared-memory round from C++
 * (build/shm_round: the probe of the mode), Open MPI's MPI_Allreduce over vader
 * (build/mpi_collectives under mpirun), the probe again, the addon's calls (awaited
 * allReduce, blocking allReduceSync, prepared run(); rank 1 makes the same calls), and
 * the probe again. A measurement counts as fast (slow) when the probes on both sides of
 * it are below (above) --fast-us; others are left out. Per mode, medians of the blocks'
 * medians and the ratios to Open MPI's. float32 sum of --bytes, 2 ranks. A benchmark,
 * not a test; table and JSON.
 *
 *   node --import tsx bench/shm/modes.ts [--blocks 40] [--calls 20000] [--bytes 8]
 *        [--fast-us 0.25] [--json out.json]
 */
import { execFileSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { freePort } from '../../test/helpers/ranks.js';
import { gang } from '../gang.js';
import { median } from '../stats.js';
import { timeBackToBack, timeBackToBackSync } from '../timing.js';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const { values: a } = parseArgs({
  options: {
    blocks: { type: 'string', default: '40' },
    calls: { type: 'string', default: '20000' },
    bytes: { type: 'string', default: '8' },
    'fast-us': { type: 'string', default: '0.25' },
    json: { type: 'string' },
  },
});
const BLOCKS = Number(a.blocks);
const CALLS = Number(a.calls);
const BYTES = Number(a.bytes);

interface Block { probe: number[]; mpiUs: number; awaitUs: number; syncUs: number; runUs: number }

if (process.env.MODES_ROLE === 'rank') {
  const { init } = await import('../../src/index.js');
  const comm = await init({ backend: 'gloo' });
  const buf = new Float32Array(Math.max(1, BYTES / 4)).fill(1);
  const prepared = comm.prepareAllReduce(buf);
  const probe = (): number => {
    const out = execFileSync(join(ROOT, 'build/shm_round'), ['2', String(CALLS * 2), String(BYTES), String(BYTES)], { encoding: 'utf8', timeout: 120_000 });
    return (JSON.parse(out.trim().split('\n')[0]!) as { us: number }).us;
  };
  const mpi = (): number => {
    const out = execFileSync('mpirun', ['--oversubscribe', '-np', '2', '--mca', 'pml', 'ob1', '--mca', 'btl', 'self,vader',
      join(ROOT, 'build/mpi_collectives'), String(CALLS), String(BYTES), String(BYTES)],
    { encoding: 'utf8', timeout: 120_000, env: { ...process.env, OMPI_ALLOW_RUN_AS_ROOT: '1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM: '1' } });
    const row = out.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { coll: string; us: number }).find((r) => r.coll === 'allreduce');
    return row!.us;
  };
  // Warm: the JIT compiles the three call paths before the first block.
  for (let i = 0; i < 3000; i++) await comm.allReduce(buf);
  for (let i = 0; i < 3000; i++) comm.allReduceSync(buf);
  for (let i = 0; i < 3000; i++) prepared.run();
  for (let b = 0; b < BLOCKS; b++) {
    // Rank 1 waits in a barrier (asleep) while rank 0 runs the probes and Open MPI.
    const p = [0, 0, 0];
    let mpiUs = 0;
    if (comm.rank === 0) {
      p[0] = probe();
      mpiUs = mpi();
      p[1] = probe();
    }
    await comm.barrier();
    // Each call timed from the end of the one before; the median of the block.
    const awaitUs = median(await timeBackToBack(CALLS, () => comm.allReduce(buf)));
    const syncUs = median(timeBackToBackSync(CALLS, () => comm.allReduceSync(buf)));
    const runUs = median(timeBackToBackSync(CALLS, () => prepared.run()));
    await comm.barrier();
    if (comm.rank === 0) {
      p[2] = probe();
      const block: Block = { probe: p, mpiUs, awaitUs: Number(awaitUs.toFixed(3)), syncUs: Number(syncUs.toFixed(3)), runUs: Number(runUs.toFixed(3)) };
      process.stdout.write(`${JSON.stringify(block)}\n`);
    }
    await comm.barrier();
  }
  prepared.free();
  await comm.destroy();
} else {
  for (const bin of ['build/shm_round', 'build/mpi_collectives']) {
    if (!existsSync(join(ROOT, bin))) throw new Error(`modes: ${bin} is missing (Open MPI installed, then the bench built: cmake/bench.cmake)`);
  }
  const port = await freePort();
  const self = fileURLToPath(import.meta.url);
  const blocks = await gang<Block>(2, (rank) => [process.execPath, ['--import', 'tsx', self, ...process.argv.slice(2)], {
    ...process.env, MODES_ROLE: 'rank', NCCL_NODE_SHM: '1', RANK: String(rank), LOCAL_RANK: String(rank), WORLD_SIZE: '2',
    LOCAL_WORLD_SIZE: '2', MASTER_ADDR: '127.0.0.1', MASTER_PORT: String(port), NCCL_NODE_TOKEN: 'shm-modes',
  }]);
  const fast = Number(a['fast-us']);
  const modeOf = (x: number, y: number): 'fast' | 'slow' | undefined => (x < fast && y < fast ? 'fast' : x >= fast && y >= fast ? 'slow' : undefined);
  const rows = (['fast', 'slow'] as const).map((mode) => {
    const mpiUs = blocks.filter((b) => modeOf(b.probe[0]!, b.probe[1]!) === mode).map((b) => b.mpiUs);
    const addon = blocks.filter((b) => modeOf(b.probe[1]!, b.probe[2]!) === mode);
    const probes = blocks.flatMap((b) => b.probe).filter((x) => (mode === 'fast' ? x < fast : x >= fast));
    const m = (xs: number[]): number | null => (xs.length ? Number(median(xs).toFixed(3)) : null);
    const mpi = m(mpiUs);
    const ratio = (x: number | null): number | null => (x !== null && mpi ? Number((x / mpi).toFixed(2)) : null);
    const awaitUs = m(addon.map((b) => b.awaitUs));
    const syncUs = m(addon.map((b) => b.syncUs));
    const runUs = m(addon.map((b) => b.runUs));
    return {
      mode, probeUs: m(probes), mpiBlocks: mpiUs.length, mpiUs: mpi, addonBlocks: addon.length, awaitUs, syncUs, runUs,
      awaitOverMpi: ratio(awaitUs), syncOverMpi: ratio(syncUs), runOverMpi: ratio(runUs),
    };
  });
  console.log(`# all-reduce of ${BYTES} bytes, 2 ranks, one host; ${BLOCKS} blocks of ${CALLS} calls; a block is fast (slow) when the C++ round's probes on both sides are below (at or above) ${fast} µs`);
  console.table(rows);
  if (a.json) writeFileSync(a.json, `${JSON.stringify({ bench: 'shm-modes', bytes: BYTES, calls: CALLS, fastUs: fast, rows, blocks }, null, 2)}\n`);
}
