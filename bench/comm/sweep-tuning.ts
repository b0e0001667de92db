/**
 * An NCCL_NODE_GLOO_TUNING table from bench/comm/sweep.ts's rows: per collective and
 * rank count, at each measured size the raw Gloo algorithm that beat the addon
 * beyond the run-to-run spread (its slowest round faster than the addon's fastest),
 * among those the addon runs correctly at that rank count; else `auto` (the
 * built-in choice). A rule covers sizes up to the geometric middle between its size
 * and the next measured one; equal neighbours merge.
 */
import type { GlooTuning, TuningCollective } from '../../src/comm/gloo/tuning.js';

export interface SweepRow {
  ranks: number;
  coll: string;
  size: number;
  addonUs: number;
  addonMin: number;
  addonMax: number;
  bestAlgo: string;
  bestUs: number;
  bestMin: number;
  bestMax: number;
  /** The addon's own TCP ring called from C++ (gloo_algos "own-tcp-ring"), when timed. */
  ownCppUs?: number;
  ratio: number;
  verdict: string;
  /** Per round, in the order run: the addon's median and the best raw algorithm's. */
  rounds?: { addonUs: number[]; bestUs: number[] };
  raw: Record<string, { us: number; min: number; max: number }>;
  /**
   * Broadcast, reduce, gather and scatter: the slowest rank's mean per call of n back to
   * back from a common start, median over rounds, the addon's and raw Gloo's, with the
   * ratio and verdict on it (rank 0's per-call time above is the root's alone).
   */
  span?: { addonUs: number; addonMin: number; addonMax: number; rawUs: number; rawMin: number; rawMax: number; ratio: number; verdict: string };
}

/** build/gloo_algos' names -> the addon's (src/comm/gloo/tuning.ts). */
const ADDON_NAME: Record<string, Record<string, string>> = {
  allreduce: {
    'new-ring': 'ring', 'new-bcube': 'bcube', 'legacy-ring': 'legacy-ring', 'legacy-ring-chunked': 'ring-chunked',
    'legacy-halving-doubling': 'halving-doubling', 'legacy-bcube': 'legacy-bcube',
  },
  allgather: { new: 'gloo', 'legacy-ring': 'legacy-ring' },
  reducescatter: { 'alltoall-reduce': 'alltoall', 'legacy-halving-doubling': 'halving-doubling' },
};

/** Where the addon runs an algorithm correctly (native/gloo/gloo_tuning.cpp falls back elsewhere). */
function runs(coll: string, algo: string, ranks: number): boolean {
  if (coll === 'allreduce' && algo === 'legacy-ring') return ranks <= 2;
  if (coll === 'allreduce' && algo === 'legacy-bcube') return (ranks & (ranks - 1)) === 0;
  return true;
}

export function tuningFromSweep(rows: SweepRow[]): GlooTuning {
  const out: GlooTuning = { version: 1 };
  for (const coll of ['allreduce', 'allgather', 'reducescatter'] as TuningCollective[]) {
    const perRanks: Record<string, { maxBytes: number | null; algorithm: string }[]> = {};
    for (const ranks of [...new Set(rows.map((r) => r.ranks))]) {
      const these = rows.filter((r) => r.coll === coll && r.ranks === ranks).sort((a, b) => a.size - b.size);
      const list: { maxBytes: number | null; algorithm: string }[] = [];
      these.forEach((r, i) => {
        const candidates = Object.entries(r.raw)
          .filter(([algo]) => ADDON_NAME[coll]![algo] && runs(coll, ADDON_NAME[coll]![algo]!, ranks))
          .sort((a, b) => a[1].us - b[1].us);
        const [algo, t] = candidates[0] ?? [];
        const algorithm = algo && t && t.max < r.addonMin ? ADDON_NAME[coll]![algo]! : 'auto';
        const next = these[i + 1];
        const maxBytes = next ? Math.floor(Math.sqrt(r.size * next.size)) : null;
        const last = list[list.length - 1];
        if (last && last.algorithm === algorithm) last.maxBytes = maxBytes;
        else list.push({ maxBytes, algorithm });
      });
      if (list.length) perRanks[String(ranks)] = list;
    }
    (out as Record<string, unknown>)[coll] = perRanks;
  }
  return out;
}
